-- The generic work queue (PostgreSQL): work items, their dimensions and
-- their pending raw events. Ids are UUIDv7 (they sort by creation time).

CREATE TABLE work_items (
    id              uuid        NOT NULL PRIMARY KEY,
    item_type       text        NOT NULL,
    phase           text        NOT NULL
                    CHECK (phase IN ('active', 'completed', 'failed', 'cancelled')),
    -- Wake-up signal for the sweep (DDR-49).
    actionable      boolean     NOT NULL DEFAULT false,
    -- Consecutive executor failures (DDR-14).
    attempts        integer     NOT NULL DEFAULT 0,
    error           text,
    leased_until    timestamptz,
    idempotency_key text,
    caller_identity text,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    last_event_at   timestamptz
);

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
    work_item_id  uuid        NOT NULL REFERENCES work_items (id) ON DELETE CASCADE,
    dimension     text        NOT NULL,
    variant       text        NOT NULL DEFAULT '',
    status        text        NOT NULL CHECK (status IN ('true', 'false')),
    detail        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    pending_until timestamptz,
    updated_at    timestamptz NOT NULL,
    PRIMARY KEY (work_item_id, dimension, variant)
);

-- Sweep branch (c): only deferred rows are indexed; the loop's exit clears
-- expired ones, so the expired range stays small.
CREATE INDEX work_item_statuses_pending_until
    ON work_item_statuses (pending_until, work_item_id)
    WHERE pending_until IS NOT NULL;

CREATE TABLE pending_events (
    id           bigserial   NOT NULL PRIMARY KEY,
    work_item_id uuid        NOT NULL REFERENCES work_items (id) ON DELETE CASCADE,
    event_type   text        NOT NULL,
    body         jsonb       NOT NULL,
    received_at  timestamptz NOT NULL
);

-- Per-item drain in arrival order; sweep branch (b).
CREATE INDEX pending_events_work_item_id ON pending_events (work_item_id, id);
