-- The oldest records not archived yet (after the archive's cursor, up to
-- the horizon audit/horizon.sql answered), in order. $1 horizon, $2 limit.
SELECT seq, id, work_item_id, at, actor, kind, old_state, new_state, trigger, metadata,
       encode(prev_hash, 'hex') AS prev_hash, encode(hash, 'hex') AS hash
FROM audit_records
WHERE seq > (SELECT seq FROM audit_archived)
  AND seq <= $1
ORDER BY seq
LIMIT $2
