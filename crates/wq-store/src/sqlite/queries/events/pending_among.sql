-- Which of the items ?1 (a JSON array of ids) have a pending event.
SELECT DISTINCT work_item_id
FROM pending_events
WHERE work_item_id IN (SELECT value FROM json_each(?1))
