-- The dimension rows of the items ?1 (a JSON array of ids), each item's in a
-- stable order: the snapshots of a batch of claims.
SELECT work_item_id, dimension, variant, status, detail, pending_until, updated_at
FROM work_item_statuses
WHERE work_item_id IN (SELECT value FROM json_each(?1))
ORDER BY work_item_id, dimension, variant
