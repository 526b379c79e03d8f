-- The oldest records not archived yet (after the archive's cursor, up to
-- the horizon audit/horizon.sql answered), in order. $1 horizon, $2 limit.
-- Through wq_audit_unarchived (migration 0015): in the primary key's order
-- whatever the statistics say.
SELECT seq, id, work_item_id, at, actor, kind, old_state, new_state, trigger, metadata,
       encode(prev_hash, 'hex') AS prev_hash, encode(hash, 'hex') AS hash
FROM wq_audit_unarchived($1, $2)
