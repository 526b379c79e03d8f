-- Appends a record and moves the chain head to it. $1 id, $2 item id, $3 at,
-- $4 actor, $5 kind, $6 old_state, $7 new_state, $8 trigger, $9 metadata,
-- $10 prev_hash, $11 hash.
WITH record AS (
    INSERT INTO audit_records (id, work_item_id, at, actor, kind, old_state, new_state,
                               trigger, metadata, prev_hash, hash)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
    RETURNING seq
)
UPDATE audit_heads SET seq = (SELECT seq FROM record), hash = $11
WHERE work_item_id = $2
RETURNING seq
