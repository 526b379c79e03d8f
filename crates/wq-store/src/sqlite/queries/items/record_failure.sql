-- Counts an executor or handler failure. ?1 id, ?2 the holder's leased_until
-- (µs), ?3 error, ?4 now (µs), ?5 permanent (0/1), ?6 max_attempts,
-- ?7 retry_at (µs).
-- An active item fails when the failure is permanent or the incremented
-- count reaches max_attempts: phase 'failed', and the holder keeps its lease
-- so that its loop goes on to park the item (it stays actionable until then).
-- Otherwise the lease moves to retry_at, a backoff the sweep and claims
-- respect. SET expressions read the row's values from before the update.
UPDATE work_items
SET attempts = attempts + 1,
    error = ?3,
    updated_at = ?4,
    phase = CASE
        WHEN phase = 'active' AND (?5 OR attempts + 1 >= ?6) THEN 'failed'
        ELSE phase
    END,
    leased_until = CASE
        WHEN phase = 'active' AND (?5 OR attempts + 1 >= ?6) THEN leased_until  -- kept: the holder parks next
        ELSE ?7
    END
WHERE id = ?1
  AND leased_until = ?2  -- still our lease
RETURNING id, item_type, phase, actionable, attempts, error, leased_until,
          idempotency_key, caller_identity, created_at, updated_at, last_event_at
