-- The generic work queue (SQLite): work items, their dimensions and their
-- pending raw events. Ids are hyphenated lowercase UUIDv7 text (they sort by
-- creation time); times are INTEGER microseconds since the Unix epoch (text
-- timestamps would not compare correctly); booleans are 0/1; JSON is text.

CREATE TABLE work_items (
    id              TEXT    NOT NULL PRIMARY KEY,
    item_type       TEXT    NOT NULL,
    phase           TEXT    NOT NULL
                    CHECK (phase IN ('active', 'completed', 'failed', 'cancelled')),
    -- Wake-up signal for the sweep (DDR-49).
    actionable      INTEGER NOT NULL DEFAULT 0 CHECK (actionable IN (0, 1)),
    -- Consecutive executor failures (DDR-14).
    attempts        INTEGER NOT NULL DEFAULT 0,
    error           TEXT,
    leased_until    INTEGER,
    idempotency_key TEXT,
    caller_identity TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    last_event_at   INTEGER
) STRICT;

-- DDR-39: at most one live (active or failed) item per idempotency key.
CREATE UNIQUE INDEX work_items_idempotency_key_live
    ON work_items (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND phase NOT IN ('completed', 'cancelled');

-- Sweep branch (a): only actionable items are indexed, so idle items cost
-- nothing.
CREATE INDEX work_items_actionable ON work_items (id) WHERE actionable;

-- Listing and counting by type and phase, newest first.
CREATE INDEX work_items_type_phase_id ON work_items (item_type, phase, id);
CREATE INDEX work_items_phase_id ON work_items (phase, id);

CREATE TABLE work_item_statuses (
    work_item_id  TEXT    NOT NULL REFERENCES work_items (id) ON DELETE CASCADE,
    dimension     TEXT    NOT NULL,
    variant       TEXT    NOT NULL DEFAULT '',
    status        TEXT    NOT NULL CHECK (status IN ('true', 'false')),
    detail        TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(detail)),
    pending_until INTEGER,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (work_item_id, dimension, variant)
) STRICT, WITHOUT ROWID;

-- Sweep branch (c): only deferred rows are indexed; the loop's exit clears
-- expired ones, so the expired range stays small.
CREATE INDEX work_item_statuses_pending_until
    ON work_item_statuses (pending_until, work_item_id)
    WHERE pending_until IS NOT NULL;

CREATE TABLE pending_events (
    id           INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    work_item_id TEXT    NOT NULL REFERENCES work_items (id) ON DELETE CASCADE,
    event_type   TEXT    NOT NULL,
    body         TEXT    NOT NULL CHECK (json_valid(body)),
    received_at  INTEGER NOT NULL
) STRICT;

-- Per-item drain in arrival order; sweep branch (b).
CREATE INDEX pending_events_work_item_id ON pending_events (work_item_id, id);
