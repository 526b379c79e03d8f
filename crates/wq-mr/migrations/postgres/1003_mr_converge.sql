-- Convergence of the `mr` type: transient merge answers retried
-- automatically, labels and target branch kept in step with the forge.

-- Transient answers (5xx, 429, timeout) to the merge call for the current
-- readiness signature, and when the next automatic call is due (NULL: none
-- is; a `failed` attempt then waits for retry-merge).
ALTER TABLE mr_details ADD COLUMN merge_transient_count bigint NOT NULL DEFAULT 0;
ALTER TABLE mr_details ADD COLUMN merge_retry_at timestamptz;
-- The labels workqueue last applied to the recorded change request (NULL:
-- unknown, so none is removed).
ALTER TABLE mr_details ADD COLUMN applied_labels jsonb;
-- The target branch the pushed head was built on.
ALTER TABLE mr_details ADD COLUMN pushed_target_branch text;
