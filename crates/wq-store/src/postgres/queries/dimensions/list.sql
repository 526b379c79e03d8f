-- The dimension rows of one item ($1), in a stable order.
SELECT dimension, variant, status, detail, pending_until, updated_at
FROM work_item_statuses
WHERE work_item_id = $1
ORDER BY dimension, variant
