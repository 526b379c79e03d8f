-- Whether item $1 has any pending event (the loop's exit check).
SELECT EXISTS (SELECT 1 FROM pending_events WHERE work_item_id = $1)
