-- Records in order, after a sequence number, optionally of one item, since a
-- time, of one actor and of one kind. ?1 after seq, ?2 item id or NULL,
-- ?3 since or NULL, ?4 actor or NULL, ?5 kind or NULL, ?6 limit, ?7 the
-- last seq to read or NULL.
--
-- SQLite plans a statement once, whatever its parameters, and uses no index
-- for a test like `(?2 IS NULL OR work_item_id = ?2)`: one statement for
-- every query scanned the records in sequence order from ?1, so an item's
-- records, or the records since a recent time, were found by reading the
-- whole trail (a million records: about 100 ms a page). Each kind of query
-- has its own arm here, and an arm whose condition on its parameters fails
-- reads nothing:
--
-- - an item's records, through its index (work_item_id, seq);
-- - the others in sequence order, from after ?1 and, with a time, from
--   the first record after ?1 at or after it. A record is numbered when it
--   is written and its time is when its change was made, so numbers and
--   times need not agree: that record is the first one after ?1 found
--   among the next 1,000 numbers (most pages of a time long past find it
--   there), else the lowest number among all the records at or after ?3,
--   from the index on (at, seq), which reads as many index entries as
--   records match the time (a recent time: few).
--
-- Both arms stop at ?7 by range, not by testing each record.
SELECT seq, id, work_item_id, at, actor, kind, old_state, new_state, trigger, metadata,
       prev_hash, hash
FROM audit_records
WHERE ?2 IS NOT NULL
  AND work_item_id = ?2
  AND seq > ?1
  AND seq <= coalesce(?7, 9223372036854775807)
  AND (?3 IS NULL OR at >= ?3)
  AND (?4 IS NULL OR actor = ?4)
  AND (?5 IS NULL OR kind = ?5)
UNION ALL
SELECT seq, id, work_item_id, at, actor, kind, old_state, new_state, trigger, metadata,
       prev_hash, hash
FROM audit_records
WHERE ?2 IS NULL
  AND seq > max(?1, CASE
                        WHEN ?3 IS NULL THEN ?1
                        ELSE coalesce((SELECT p.seq - 1
                                       FROM audit_records AS p
                                       WHERE p.seq > ?1
                                         AND p.seq <= ?1 + 1000
                                         AND p.at >= ?3
                                       ORDER BY p.seq
                                       LIMIT 1),
                                      (SELECT min(s.seq) - 1
                                       FROM audit_records AS s INDEXED BY audit_records_at
                                       WHERE s.at >= ?3),
                                      (SELECT max(s.seq) FROM audit_records AS s),
                                      ?1)
                    END)
  AND seq <= coalesce(?7, 9223372036854775807)
  AND (?3 IS NULL OR at >= ?3)
  AND (?4 IS NULL OR actor = ?4)
  AND (?5 IS NULL OR kind = ?5)
ORDER BY seq
LIMIT ?6
