-- The outcome of an attempt: accepted clears only an auto_merge error.
UPDATE mr_details
SET last_merge_result = $2,
    last_queue_attempt_head_sha = COALESCE($3, last_queue_attempt_head_sha),
    last_error_kind = CASE WHEN $2 = 'accepted' AND last_error_kind = 'auto_merge' THEN NULL
                           WHEN $2 = 'accepted' THEN last_error_kind
                           ELSE $4 END,
    last_error = CASE WHEN $2 = 'accepted' AND last_error_kind = 'auto_merge' THEN NULL
                      WHEN $2 = 'accepted' THEN last_error
                      ELSE $5 END,
    merge_retry_at = NULL,
    updated_at = $6
WHERE work_item_id = $1
