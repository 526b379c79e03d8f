-- ensure_mr: a push is about to leave; cleared by record_push. Made only
-- while the caller's run holds the item (wq_store's lease_held, in the same
-- transaction). $1 id, $2 now.
UPDATE mr_details SET push_intent_at = $2, updated_at = $2 WHERE work_item_id = $1
