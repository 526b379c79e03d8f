-- Appends chained records, in order, bound as parameters: this statement
-- followed by one `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)` per record, joined by
-- commas (SQLite has no array parameter; sqlite::park writes the list, for
-- batches of 1, 2, 4, ... 64 records, so a few statements are prepared
-- once). Each record: id, item, at (µs), actor, kind, old_state,
-- new_state, trigger, metadata (JSON text; NULL for none), prev_hash,
-- hash. Under the single writer the records get consecutive sequence
-- numbers in that order, the last one the statement's last insert rowid
-- (AUTOINCREMENT never reuses a number).
INSERT INTO audit_records (id, work_item_id, at, actor, kind, old_state, new_state,
                           trigger, metadata, prev_hash, hash)
VALUES
