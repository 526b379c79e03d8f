-- Appends a record. ?1 id, ?2 item id, ?3 at (µs), ?4 actor, ?5 kind,
-- ?6 old_state, ?7 new_state, ?8 trigger, ?9 metadata (JSON text),
-- ?10 prev_hash, ?11 hash.
INSERT INTO audit_records (id, work_item_id, at, actor, kind, old_state, new_state,
                           trigger, metadata, prev_hash, hash)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
RETURNING seq
