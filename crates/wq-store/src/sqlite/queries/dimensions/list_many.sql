-- The dimension rows of many items (?1, a JSON array of ids), by item, in
-- a stable order.
SELECT work_item_id, dimension, variant, status, detail, pending_until, updated_at
FROM work_item_statuses
WHERE work_item_id IN (SELECT value FROM json_each(?1))
ORDER BY work_item_id, dimension, variant
