-- Retry API: a failed or cancelled item becomes active and actionable again,
-- with a clean failure count and no lease. $1 id, $2 now.
-- Reactivating a cancelled item can collide with a newer generation on
-- work_items_idempotency_key_live.
UPDATE work_items
SET phase = 'active',
    actionable = true,
    attempts = 0,
    error = NULL,
    leased_until = NULL,
    updated_at = $2
WHERE id = $1
  AND phase IN ('failed', 'cancelled')  -- only these may be retried (DDR-37)
RETURNING id, item_type, phase, actionable, attempts, error, leased_until,
          idempotency_key, caller_identity, created_at, updated_at, last_event_at
