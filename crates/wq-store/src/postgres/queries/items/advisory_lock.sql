-- The per-item advisory lock (DDR-34), held to the end of the transaction:
-- serialises event inserts with the loop's exit decision. $1 lock_key(id).
SELECT pg_advisory_xact_lock($1)
