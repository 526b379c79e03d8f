-- The oldest records not archived yet, in order. $1 limit.
SELECT seq, id, work_item_id, at, actor, kind, old_state, new_state, trigger, metadata,
       prev_hash, hash
FROM audit_records
WHERE archived_at IS NULL
ORDER BY seq
LIMIT $1
