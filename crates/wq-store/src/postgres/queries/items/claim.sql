-- Claims an item for one loop run: a single UPDATE, so of two concurrent
-- claimers the second re-checks the WHERE clause on the committed row and
-- finds it leased. $1 id, $2 now, $3 lease_until, $4 handled types. The
-- claim draws the item's next lease epoch.
UPDATE work_items
SET leased_until = $3,
    lease_epoch = lease_epoch + 1
WHERE id = $1
  AND (leased_until IS NULL OR leased_until <= $2)  -- unleased, or the lease expired
  AND item_type = ANY($4::text[])                   -- only types this process handles
RETURNING id, item_type, phase, actionable, attempts, error, leased_until,
          idempotency_key, caller_identity, created_at, updated_at, last_event_at,
          lease_epoch
