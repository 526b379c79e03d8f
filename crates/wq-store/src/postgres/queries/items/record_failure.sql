-- Counts an executor or handler failure. $1 id, $2 the holder's
-- leased_until, $3 error, $4 now, $5 permanent, $6 max_attempts, $7 retry_at,
-- $8 outage, $9 the outage budget's start (now - budget).
-- The streak began at failing_since, or now when this is its first failure
-- (attempts 0: a success resets the count).
-- An active item fails when the failure is permanent, when a counted
-- failure (not an outage) brings the streak's failures less its outages
-- (outage_failures) to max_attempts, or when an
-- outage's streak began before the budget's start: phase 'failed', and the
-- holder keeps its lease so that its loop goes on to park the item (it
-- stays actionable until then). Otherwise the lease moves to retry_at, a
-- backoff the sweep and claims respect. SET expressions read the row's
-- values from before the update.
UPDATE work_items
SET attempts = attempts + 1,
    error = $3,
    updated_at = $4,
    failing_since = CASE WHEN attempts = 0 THEN $4 ELSE coalesce(failing_since, $4) END,
    outage_failures = CASE WHEN attempts = 0 THEN 0 ELSE outage_failures END + CASE WHEN $8 THEN 1 ELSE 0 END,
    phase = CASE
        WHEN phase = 'active' AND (
            $5
            OR (NOT $8 AND attempts + 1 - CASE WHEN attempts = 0 THEN 0 ELSE outage_failures END >= $6)
            OR ($8 AND CASE WHEN attempts = 0 THEN $4 ELSE coalesce(failing_since, $4) END <= $9)
        ) THEN 'failed'
        ELSE phase
    END,
    leased_until = CASE
        WHEN phase = 'active' AND (
            $5
            OR (NOT $8 AND attempts + 1 - CASE WHEN attempts = 0 THEN 0 ELSE outage_failures END >= $6)
            OR ($8 AND CASE WHEN attempts = 0 THEN $4 ELSE coalesce(failing_since, $4) END <= $9)
        ) THEN leased_until  -- kept: the holder parks next
        ELSE $7
    END
WHERE id = $1
  AND leased_until = $2  -- still our lease
RETURNING id, item_type, phase, actionable, attempts, error, leased_until,
          idempotency_key, caller_identity, created_at, updated_at, last_event_at
