-- The oldest records not archived yet, in order. $1 limit. Through
-- wq_audit_unarchived (migration 0014): in index order whatever the
-- statistics say.
SELECT seq, id, work_item_id, at, actor, kind, old_state, new_state, trigger, metadata,
       encode(prev_hash, 'hex') AS prev_hash, encode(hash, 'hex') AS hash
FROM wq_audit_unarchived($1)
