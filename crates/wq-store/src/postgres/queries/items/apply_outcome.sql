-- A successful executor's changes to the item row (its dimension upserts run
-- in the same transaction, after this UPDATE took the row lock). attempts
-- counts consecutive failures, so success resets it (DDR-14). $1 id, $2 the
-- holder's leased_until, $3 new phase or NULL to keep it, $4 error
-- afterwards, $5 now.
UPDATE work_items
SET attempts = 0,
    phase = coalesce($3, phase),
    error = $4,
    updated_at = $5
WHERE id = $1
  AND leased_until = $2  -- still our lease
RETURNING id, item_type, phase, actionable, attempts, error, leased_until,
          idempotency_key, caller_identity, created_at, updated_at, last_event_at
