-- The durable in_flight reservation before a merge call (the correctness
-- boundary: whoever gets a row back calls the forge). Taken only when no
-- attempt is in flight and the readiness signature is new, or a one-shot
-- retry was authorized (which it consumes), or an automatic retry after a
-- transient answer is due (`merge_retry_at`, set only after a re-read proved
-- the earlier call neither merged nor queued). The transient count carries
-- over to that automatic retry only. Made only while the caller's run
-- holds the item (wq_store's lease_held, in the same transaction): a run
-- whose lease expired (paused past it, say) or was claimed again makes no
-- merge call on a reading another run may have overtaken. $1 id,
-- $2 signature, $3 now, $4 false.
UPDATE mr_details
SET last_merge_signature = $2, last_merge_attempt_at = $3, last_merge_result = 'in_flight',
    merge_retry_authorized = $4,
    merge_transient_count = CASE WHEN merge_retry_at IS NOT NULL AND last_merge_signature = $2
                                 THEN merge_transient_count ELSE 0 END,
    merge_retry_at = NULL,
    updated_at = $3
WHERE work_item_id = $1
  AND (last_merge_result IS NULL OR last_merge_result <> 'in_flight')
  AND (merge_retry_authorized
       OR last_merge_result IS NULL
       OR last_merge_signature IS NULL
       OR last_merge_signature <> $2
       OR (last_merge_result = 'failed' AND merge_retry_at IS NOT NULL AND merge_retry_at <= $3))
RETURNING work_item_id
