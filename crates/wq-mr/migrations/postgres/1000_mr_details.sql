-- The `mr` item type's detail table (PostgreSQL): one row per work item, the
-- desired state a caller submitted, what the forge was last seen to hold,
-- and the merge-attempt journal.

CREATE TABLE mr_details (
    work_item_id                uuid        NOT NULL PRIMARY KEY
                                REFERENCES work_items (id) ON DELETE CASCADE,
    forge                       text        NOT NULL,
    project                     text        NOT NULL,
    source_branch               text        NOT NULL,
    target_branch               text        NOT NULL,
    -- DDR-39: increments when a new item follows a terminal one.
    generation                  bigint      NOT NULL,
    title                       text        NOT NULL,
    description                 text        NOT NULL,
    commit_message              text        NOT NULL,
    labels                      jsonb       NOT NULL,
    -- DDR-9: the structured actions, content base64-encoded.
    file_actions                jsonb       NOT NULL,
    auto_merge                  boolean     NOT NULL,
    ci_retry                    boolean     NOT NULL,
    -- DDR-40: SHA-256 of the normalized actions, and of the metadata.
    content_hash                text        NOT NULL,
    metadata_hash               text        NOT NULL,
    -- What the forge holds.
    mr_number                   bigint,
    mr_url                      text,
    head_sha                    text,
    head_pipeline_id            bigint,
    pushed_content_hash         text,
    -- Last authoritative merge queue / merge train observation.
    merge_queue_state           text        NOT NULL DEFAULT '',
    merge_queue_position        bigint,
    merge_queue_eta_seconds     bigint,
    -- Merge-attempt journal.
    last_merge_signature        text,
    last_merge_attempt_at       timestamptz,
    last_queue_attempt_head_sha text,
    last_merge_result           text
                                CHECK (last_merge_result IN ('in_flight', 'failed', 'accepted')),
    last_error_kind             text,
    last_error                  text,
    merge_retry_authorized      boolean     NOT NULL DEFAULT false,
    created_at                  timestamptz NOT NULL,
    updated_at                  timestamptz NOT NULL
);

-- Upsert lookup (DDR-40) and the generation counter.
CREATE INDEX mr_details_branch ON mr_details (forge, project, source_branch, generation);
-- Webhook resolution.
CREATE INDEX mr_details_number ON mr_details (forge, project, mr_number)
    WHERE mr_number IS NOT NULL;
CREATE INDEX mr_details_pipeline ON mr_details (forge, project, head_pipeline_id)
    WHERE head_pipeline_id IS NOT NULL;
