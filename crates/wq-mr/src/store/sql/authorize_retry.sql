-- The explicit one-shot retry: only after a failed attempt, or an in_flight
-- one past its deadline (expired in_flight -> failed -> authorized).
UPDATE mr_details
SET merge_retry_authorized = $4,
    last_error_kind = CASE WHEN last_merge_result = 'in_flight' THEN 'auto_merge'
                           ELSE last_error_kind END,
    last_error = CASE WHEN last_merge_result = 'in_flight'
                      THEN 'the merge attempt was interrupted before the forge answered'
                      ELSE last_error END,
    last_merge_result = 'failed',
    merge_retry_at = NULL,
    updated_at = $2
WHERE work_item_id = $1
  AND (last_merge_result = 'failed'
       OR (last_merge_result = 'in_flight' AND last_merge_attempt_at < $3))
RETURNING work_item_id
