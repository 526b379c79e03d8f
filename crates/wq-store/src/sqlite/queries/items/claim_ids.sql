-- Leases the items ?1 (a JSON array of ids; what items/due_snapshots.sql
-- just answered, in the same write transaction) until ?2 (µs).
UPDATE work_items
SET leased_until = ?2
WHERE id IN (SELECT value FROM json_each(?1))
