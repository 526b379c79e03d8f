-- Locks the item's chain head and reads its hash ('' for a new chain).
-- $1 item id.
INSERT INTO audit_heads (work_item_id, seq, hash)
VALUES ($1, 0, '')
ON CONFLICT (work_item_id) DO UPDATE SET work_item_id = EXCLUDED.work_item_id
RETURNING hash
