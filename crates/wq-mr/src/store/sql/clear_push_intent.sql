-- ensure_mr: the forge refused the push outright, so nothing left: the
-- branch's head vouches for itself again.
UPDATE mr_details SET push_intent_at = NULL, updated_at = $2 WHERE work_item_id = $1
