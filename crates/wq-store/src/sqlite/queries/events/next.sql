-- The oldest pending event of one item (?1); served by
-- pending_events_work_item_id.
SELECT id, work_item_id, event_type, body, received_at, delivery_id, raw
FROM pending_events
WHERE work_item_id = ?1
ORDER BY id
LIMIT 1
