-- The oldest records not archived yet (after the archive's cursor), in
-- order. ?1 limit.
SELECT seq, id, work_item_id, at, actor, kind, old_state, new_state, trigger, metadata,
       prev_hash, hash
FROM audit_records
WHERE seq > (SELECT seq FROM audit_archived)
ORDER BY seq
LIMIT ?1
