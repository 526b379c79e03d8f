-- Appends a record chained to the head its caller expects, only if that is
-- still the item's head (audit/head.sql's answer): no row otherwise, and
-- the caller reads the head and appends with audit/append.sql. The check
-- and the insert are one statement under the write lock, so a stale guess
-- costs a statement, never a broken chain. ?1 id, ?2 item id, ?3 at (µs),
-- ?4 actor, ?5 kind, ?6 old_state, ?7 new_state, ?8 trigger, ?9 metadata
-- (JSON text), ?10 prev_hash (the expected head), ?11 hash.
INSERT INTO audit_records (id, work_item_id, at, actor, kind, old_state, new_state,
                           trigger, metadata, prev_hash, hash)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11
WHERE coalesce((SELECT hash FROM audit_records WHERE work_item_id = ?2
                ORDER BY seq DESC LIMIT 1),
               (SELECT hash FROM audit_pruned WHERE work_item_id = ?2),
               '') = ?10
RETURNING seq
