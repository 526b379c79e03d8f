-- The audit trail: an append-only record of every change to an item, who
-- asked for it and what the forge answered, written in the transaction of
-- the change it records. Each item's records form a hash chain: a record
-- carries the SHA-256 of the item's previous record (`prev_hash`, empty for
-- the first) and of its own canonical JSON (`hash`).
CREATE TABLE audit_records (
    seq          bigserial PRIMARY KEY,
    id           uuid        NOT NULL UNIQUE,
    work_item_id uuid        NOT NULL,
    at           timestamptz NOT NULL,
    actor        text        NOT NULL,
    kind         text        NOT NULL,
    old_state    jsonb,
    new_state    jsonb,
    trigger      jsonb,
    metadata     jsonb       NOT NULL,
    prev_hash    text        NOT NULL,
    hash         text        NOT NULL
);
CREATE INDEX audit_records_item ON audit_records (work_item_id, seq);
CREATE INDEX audit_records_at ON audit_records (at, seq);

-- The last record of each item's chain. Appends lock its row (always the
-- last lock a transaction takes), so two writers of one item chain in turn.
CREATE TABLE audit_heads (
    work_item_id uuid   PRIMARY KEY,
    seq          bigint NOT NULL,
    hash         text   NOT NULL
);

-- Archiving: when a record was shipped to the archive (NULL: not yet), and
-- for each chain whose oldest records left the database after archiving,
-- the hash of the last one that left (where verification picks it up).
ALTER TABLE audit_records ADD COLUMN archived_at timestamptz;
CREATE INDEX audit_records_unarchived ON audit_records (seq) WHERE archived_at IS NULL;
CREATE TABLE audit_pruned (
    work_item_id uuid   PRIMARY KEY,
    seq          bigint NOT NULL,
    hash         text   NOT NULL
);
