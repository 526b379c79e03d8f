-- Deletes one handled event. $1 event id, $2 item id (an event of another
-- item is never deleted).
DELETE FROM pending_events
WHERE id = $1
  AND work_item_id = $2
