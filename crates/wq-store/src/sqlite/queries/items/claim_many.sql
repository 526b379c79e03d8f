-- Claims many items, each as items/claim.sql does, in one statement: for
-- claims that arrive together from different workers. ?1 the claims as a
-- JSON array of {id, now (µs), until (µs)} with distinct ids, ?2 handled
-- types as a JSON array of strings. Runs in the writer's transaction, so
-- no other claim interleaves.
UPDATE work_items
SET leased_until = claims.claim_until
FROM (
    SELECT value ->> 'id' AS claim_id,
           value ->> 'now' AS claim_now,
           value ->> 'until' AS claim_until
    FROM json_each(?1)
) AS claims
WHERE work_items.id = claims.claim_id
  AND (work_items.leased_until IS NULL OR work_items.leased_until <= claims.claim_now)
  AND work_items.item_type IN (SELECT value FROM json_each(?2))
RETURNING id, item_type, phase, actionable, attempts, error, leased_until,
          idempotency_key, caller_identity, created_at, updated_at, last_event_at
