-- The `mr` item type's detail table (SQLite): one row per work item, the
-- desired state a caller submitted, what the forge was last seen to hold,
-- and the merge-attempt journal. Times are INTEGER microseconds since the
-- epoch, JSON is text, booleans are 0/1, like the generic tables.

CREATE TABLE mr_details (
    work_item_id                TEXT    NOT NULL PRIMARY KEY
                                REFERENCES work_items (id) ON DELETE CASCADE,
    forge                       TEXT    NOT NULL,
    project                     TEXT    NOT NULL,
    source_branch               TEXT    NOT NULL,
    target_branch               TEXT    NOT NULL,
    -- DDR-39: increments when a new item follows a terminal one.
    generation                  INTEGER NOT NULL,
    title                       TEXT    NOT NULL,
    description                 TEXT    NOT NULL,
    commit_message              TEXT    NOT NULL,
    labels                      TEXT    NOT NULL CHECK (json_valid(labels)),
    -- DDR-9: the structured actions, content base64-encoded.
    file_actions                TEXT    NOT NULL CHECK (json_valid(file_actions)),
    auto_merge                  INTEGER NOT NULL CHECK (auto_merge IN (0, 1)),
    ci_retry                    INTEGER NOT NULL CHECK (ci_retry IN (0, 1)),
    -- DDR-40: SHA-256 of the normalized actions, and of the metadata.
    content_hash                TEXT    NOT NULL,
    metadata_hash               TEXT    NOT NULL,
    -- What the forge holds.
    mr_number                   INTEGER,
    mr_url                      TEXT,
    head_sha                    TEXT,
    head_pipeline_id            INTEGER,
    pushed_content_hash         TEXT,
    -- Last authoritative merge queue / merge train observation.
    merge_queue_state           TEXT    NOT NULL DEFAULT '',
    merge_queue_position        INTEGER,
    merge_queue_eta_seconds     INTEGER,
    -- Merge-attempt journal.
    last_merge_signature        TEXT,
    last_merge_attempt_at       INTEGER,
    last_queue_attempt_head_sha TEXT,
    last_merge_result           TEXT
                                CHECK (last_merge_result IN ('in_flight', 'failed', 'accepted')),
    last_error_kind             TEXT,
    last_error                  TEXT,
    merge_retry_authorized      INTEGER NOT NULL DEFAULT 0
                                CHECK (merge_retry_authorized IN (0, 1)),
    created_at                  INTEGER NOT NULL,
    updated_at                  INTEGER NOT NULL
) STRICT;

-- Upsert lookup (DDR-40) and the generation counter.
CREATE INDEX mr_details_branch ON mr_details (forge, project, source_branch, generation);
-- Webhook resolution.
CREATE INDEX mr_details_number ON mr_details (forge, project, mr_number)
    WHERE mr_number IS NOT NULL;
CREATE INDEX mr_details_pipeline ON mr_details (forge, project, head_pipeline_id)
    WHERE head_pipeline_id IS NOT NULL;
