-- ensure_mr: a push is about to leave; cleared by record_push.
UPDATE mr_details SET push_intent_at = $2, updated_at = $2 WHERE work_item_id = $1
