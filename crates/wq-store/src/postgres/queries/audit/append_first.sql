-- Appends the first record of an item inserted in the caller's transaction
-- (`append_first_audit`): its chain is new and no other transaction sees
-- the item yet, so no chain lock is taken and no head read: the record is
-- chained after the empty hash, which the caller hashed with it. The
-- trail's barrier is taken, shared, before the record's sequence number
-- is drawn, as every append takes it (migration 0015). $1 id, $2 item, $3
-- at, $4 actor, $5 kind, $6 old_state, $7 new_state, $8 trigger (JSON
-- text or NULL), $9 metadata (JSON text), $10 the record's hash (hex).
-- Answers the record's sequence number.
WITH barrier AS (
    SELECT pg_advisory_xact_lock_shared(2003919221, 0)
)
INSERT INTO audit_records (id, work_item_id, at, actor, kind, old_state, new_state,
                           trigger, metadata, prev_hash, hash)
SELECT $1, $2, $3, $4, $5, $6::json, $7::json, $8::json, $9::json, ''::bytea, decode($10, 'hex')
FROM barrier
RETURNING seq
