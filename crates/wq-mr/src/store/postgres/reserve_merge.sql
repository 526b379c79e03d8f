-- The durable in_flight reservation before a merge call; consumes a
-- one-shot retry authorization.
UPDATE mr_details
SET last_merge_signature = $2, last_merge_attempt_at = $3, last_merge_result = 'in_flight',
    merge_retry_authorized = $4, updated_at = $3
WHERE work_item_id = $1
