-- Claims an item for one loop run: a single UPDATE, so two claimers cannot
-- both win. ?1 id, ?2 now (µs), ?3 lease_until (µs), ?4 handled types as a
-- JSON array of strings. The claim draws the item's next lease epoch.
UPDATE work_items
SET leased_until = ?3,
    lease_epoch = lease_epoch + 1
WHERE id = ?1
  AND (leased_until IS NULL OR leased_until <= ?2)                -- unleased, or the lease expired
  AND item_type IN (SELECT value FROM json_each(?4))              -- only types this process handles
RETURNING id, item_type, phase, actionable, attempts, error, leased_until,
          idempotency_key, caller_identity, created_at, updated_at, last_event_at,
          lease_epoch
