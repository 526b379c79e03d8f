-- Ownership of the `mr` type's forge work (issue #12): the branch heads
-- workqueue pushed, whether it opened the recorded change request, a push
-- in progress, and every accepted submission's submitter.

-- Every head workqueue pushed, per branch line (forge, project, source
-- branch): any generation's push makes the branch workqueue's.
CREATE TABLE mr_pushes (
    forge         text        NOT NULL,
    project       text        NOT NULL,
    source_branch text        NOT NULL,
    head_sha      text        NOT NULL,
    work_item_id  uuid        NOT NULL REFERENCES work_items (id) ON DELETE CASCADE,
    pushed_at     timestamptz NOT NULL,
    PRIMARY KEY (forge, project, source_branch, head_sha)
);
CREATE INDEX mr_pushes_branch_ci ON mr_pushes (forge, lower(project), source_branch);

-- The recorded change request was opened by workqueue.
ALTER TABLE mr_details ADD COLUMN mr_created boolean NOT NULL DEFAULT false;
-- Set before a push, cleared when its head is recorded: a push whose result
-- was lost in a crash leaves the intent, so the unknown head is this item's.
ALTER TABLE mr_details ADD COLUMN push_intent_at timestamptz;

-- Rows from before this migration: what they recorded was theirs.
UPDATE mr_details SET mr_created = true WHERE mr_number IS NOT NULL;
INSERT INTO mr_pushes (forge, project, source_branch, head_sha, work_item_id, pushed_at)
SELECT forge, project, source_branch, head_sha, work_item_id, updated_at
FROM mr_details
WHERE head_sha IS NOT NULL AND pushed_content_hash IS NOT NULL
ON CONFLICT DO NOTHING;

-- Every accepted submission and its submitter.
CREATE TABLE mr_submissions (
    work_item_id    uuid        NOT NULL REFERENCES work_items (id) ON DELETE CASCADE,
    generation      bigint      NOT NULL,
    content_hash    text        NOT NULL,
    outcome         text        NOT NULL
                    CHECK (outcome IN ('created', 'updated', 'unchanged', 'retried')),
    caller_identity text        NOT NULL,
    submitted_at    timestamptz NOT NULL
);
CREATE INDEX mr_submissions_item ON mr_submissions (work_item_id, submitted_at);

-- Lookups compare the project case-insensitively (forge paths are).
CREATE INDEX mr_details_branch_ci ON mr_details (forge, lower(project), source_branch);
CREATE INDEX mr_details_number_ci ON mr_details (forge, lower(project), mr_number)
    WHERE mr_number IS NOT NULL;
CREATE INDEX mr_details_pipeline_ci ON mr_details (forge, lower(project), head_pipeline_id)
    WHERE head_pipeline_id IS NOT NULL;
