-- Leases the items ?1 (a JSON array of ids; what items/due_snapshots.sql
-- just answered, in the same write transaction) until ?2 (µs), each
-- under its next lease epoch (the one it answered, plus one).
UPDATE work_items
SET leased_until = ?2,
    lease_epoch = lease_epoch + 1
WHERE id IN (SELECT value FROM json_each(?1))
