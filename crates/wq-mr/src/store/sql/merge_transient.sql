-- reconcile_mr: the merge call got a transient answer (5xx, 429, timeout)
-- and the change request was read again. Written whatever that read found
-- (open at the checked head, moved, closed); merged or queued are recorded
-- as accepted elsewhere. The attempt is `failed` with its error; $4 is when the
-- next automatic call is due, NULL when the budget is spent (then only
-- retry-merge tries again). $1 id, $2 error, $3 now.
UPDATE mr_details
SET last_merge_result = 'failed',
    last_error_kind = 'auto_merge',
    last_error = $2,
    merge_transient_count = merge_transient_count + 1,
    merge_retry_at = $4,
    updated_at = $3
WHERE work_item_id = $1 AND last_merge_result = 'in_flight'
