-- The audit trail with fewer indexes to write per record, as PostgreSQL's
-- has since 0008: a record's id is a UUIDv7 made by the store, unique by
-- construction, so it loses its UNIQUE index; and archiving no longer marks
-- every record (an update of each row, and a partial index that every
-- append wrote to) but moves a cursor. Under SQLite's single writer records
-- get their seq in commit order, so what a reader sees is always a prefix
-- of the sequence, and "archived" is "seq <= audit_archived.seq".
-- AUTOINCREMENT never reuses a number, so a record written later is never
-- numbered below the cursor; the rebuilt table keeps the old sequence.

-- The cursor: the records up to the first one not archived yet. Records
-- archived after that one (not possible with the shipper, which goes in
-- order) are shipped again: shipping is at least once.
CREATE TABLE audit_archived (
    singleton   INTEGER PRIMARY KEY CHECK (singleton = 1),
    seq         INTEGER NOT NULL,
    archived_at INTEGER
);
INSERT INTO audit_archived (singleton, seq, archived_at)
VALUES (1,
        coalesce((SELECT min(seq) - 1 FROM audit_records WHERE archived_at IS NULL),
                 (SELECT max(seq) FROM audit_records),
                 (SELECT seq FROM sqlite_sequence WHERE name = 'audit_records'),
                 0),
        (SELECT max(archived_at) FROM audit_records));

DROP INDEX audit_records_item;
DROP INDEX audit_records_at;
DROP INDEX audit_records_unarchived;
ALTER TABLE audit_records RENAME TO audit_records_old;
CREATE TABLE audit_records (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT    NOT NULL,
    work_item_id TEXT    NOT NULL,
    at           INTEGER NOT NULL,
    actor        TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    old_state    TEXT,
    new_state    TEXT,
    trigger      TEXT,
    metadata     TEXT    NOT NULL,
    prev_hash    TEXT    NOT NULL,
    hash         TEXT    NOT NULL
);
INSERT INTO audit_records (seq, id, work_item_id, at, actor, kind, old_state, new_state,
                           trigger, metadata, prev_hash, hash)
SELECT seq, id, work_item_id, at, actor, kind, old_state, new_state, trigger, metadata,
       prev_hash, hash
FROM audit_records_old
ORDER BY seq;
-- The sequence goes on from the last number the old table gave, even where
-- its newest records were pruned.
INSERT INTO sqlite_sequence (name, seq)
SELECT 'audit_records', 0
WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'audit_records');
UPDATE sqlite_sequence
SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'audit_records_old'), 0))
WHERE name = 'audit_records';
DROP TABLE audit_records_old;
CREATE INDEX audit_records_item ON audit_records (work_item_id, seq);
CREATE INDEX audit_records_at ON audit_records (at, seq);
