-- Records in order, after a sequence number, optionally of one item, since a
-- time, of one actor and of one kind. ?1 after seq, ?2 item id or NULL,
-- ?3 since or NULL, ?4 actor or NULL, ?5 kind or NULL, ?6 limit, ?7 the
-- last seq to read or NULL.
SELECT seq, id, work_item_id, at, actor, kind, old_state, new_state, trigger, metadata,
       prev_hash, hash
FROM audit_records
WHERE seq > ?1
  AND (?2 IS NULL OR work_item_id = ?2)
  AND (?3 IS NULL OR at >= ?3)
  AND (?4 IS NULL OR actor = ?4)
  AND (?5 IS NULL OR kind = ?5)
  AND (?7 IS NULL OR seq <= ?7)
ORDER BY seq
LIMIT ?6
