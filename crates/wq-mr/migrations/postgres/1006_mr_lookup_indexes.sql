-- Lookups compare the project case-insensitively since migration 1002,
-- whose indexes on (forge, lower(project), ...) superseded those of 1000 on
-- (forge, project, ...). The old ones only cost every write of mr_details,
-- and without statistics led the planner to them (SQLite read every row of
-- a forge to compare lower(project)). Webhook resolution by head commit
-- (GitHub's check runs and statuses name the commit) had no index and read
-- every row of the forge.
DROP INDEX mr_details_branch;
DROP INDEX mr_details_number;
DROP INDEX mr_details_pipeline;
CREATE INDEX mr_details_head_ci ON mr_details (forge, lower(project), head_sha)
    WHERE head_sha IS NOT NULL;
