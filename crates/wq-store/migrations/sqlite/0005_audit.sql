-- The audit trail: an append-only record of every change to an item, who
-- asked for it and what the forge answered, written in the transaction of
-- the change it records. Each item's records form a hash chain: a record
-- carries the SHA-256 of the item's previous record (`prev_hash`, empty for
-- the first) and of its own canonical JSON (`hash`). Times in µs since the
-- epoch; the single writer orders the appends of one item.
CREATE TABLE audit_records (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT    NOT NULL UNIQUE,
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
CREATE INDEX audit_records_item ON audit_records (work_item_id, seq);
CREATE INDEX audit_records_at ON audit_records (at, seq);

-- Archiving: when a record was shipped to the archive (NULL: not yet), and
-- for each chain whose oldest records left the database after archiving,
-- the hash of the last one that left (where verification picks it up).
ALTER TABLE audit_records ADD COLUMN archived_at INTEGER;
CREATE INDEX audit_records_unarchived ON audit_records (seq) WHERE archived_at IS NULL;
CREATE TABLE audit_pruned (
    work_item_id TEXT    PRIMARY KEY,
    seq          INTEGER NOT NULL,
    hash         TEXT    NOT NULL
);
