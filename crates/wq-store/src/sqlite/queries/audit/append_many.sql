-- Appends many chained records, in order. ?1: a JSON array of {id, item,
-- at (µs), actor, kind, old_state, new_state, trigger, metadata (each JSON
-- text or null), prev_hash, hash}. Under the single writer the records get
-- consecutive sequence numbers in that order, the last one the
-- statement's last insert rowid (AUTOINCREMENT never reuses a number).
INSERT INTO audit_records (id, work_item_id, at, actor, kind, old_state, new_state,
                           trigger, metadata, prev_hash, hash)
SELECT value ->> 'id', value ->> 'item', value ->> 'at', value ->> 'actor', value ->> 'kind',
       value ->> 'old_state', value ->> 'new_state', value ->> 'trigger', value ->> 'metadata',
       value ->> 'prev_hash', value ->> 'hash'
FROM json_each(?1)
ORDER BY key
