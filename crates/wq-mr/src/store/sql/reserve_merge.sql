-- The durable in_flight reservation before a merge call (the correctness
-- boundary: whoever gets a row back calls the forge). Taken only when no
-- attempt is in flight and the readiness signature is new, or a one-shot
-- retry was authorized (which it consumes). $1 id, $2 signature, $3 now,
-- $4 false.
UPDATE mr_details
SET last_merge_signature = $2, last_merge_attempt_at = $3, last_merge_result = 'in_flight',
    merge_retry_authorized = $4, updated_at = $3
WHERE work_item_id = $1
  AND (last_merge_result IS NULL OR last_merge_result <> 'in_flight')
  AND (merge_retry_authorized
       OR last_merge_result IS NULL
       OR last_merge_signature IS NULL
       OR last_merge_signature <> $2)
RETURNING work_item_id