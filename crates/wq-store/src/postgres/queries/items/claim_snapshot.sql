-- Claims item $1 (as items/claim.sql) and returns it as items/snapshot.sql
-- does, in one round trip: how the loop starts. $1 id, $2 now,
-- $3 lease_until, $4 handled types. The claim draws the item's next lease
-- epoch.
--
-- The dimension and event reads below see the statement's snapshot. When
-- another worker's commit lands between that snapshot and the UPDATE (it
-- parks the item, say), PostgreSQL re-checks the UPDATE's conditions on the
-- newer row and would claim it with dimensions from before that commit: the
-- loop would redo a step that was already done. So the claim also requires
-- the row version to be the one the snapshot sees (xmin unchanged); a row
-- changed meanwhile is not claimed, and whoever changed it owns its state.
WITH claimed AS (
    UPDATE work_items
    SET leased_until = $3,
        lease_epoch = lease_epoch + 1
    WHERE id = $1
      AND (leased_until IS NULL OR leased_until <= $2)  -- unleased, or the lease expired
      AND item_type = ANY($4::text[])                   -- only types this process handles
      AND xmin = (SELECT w.xmin FROM work_items w WHERE w.id = $1)  -- not changed since the snapshot
    RETURNING id, item_type, phase, actionable, attempts, error, leased_until,
              idempotency_key, caller_identity, created_at, updated_at, last_event_at, lease_epoch
)
SELECT c.id, c.item_type, c.phase, c.actionable, c.attempts, c.error, c.leased_until,
       c.idempotency_key, c.caller_identity, c.created_at, c.updated_at, c.last_event_at,
       c.lease_epoch,
       EXISTS (SELECT 1 FROM pending_events e WHERE e.work_item_id = c.id) AS has_events,
       coalesce(
           (SELECT json_agg(
                       json_build_object(
                           'dimension', s.dimension,
                           'variant', s.variant,
                           'status', s.status,
                           'detail', s.detail,
                           'pending_until', (extract(epoch FROM s.pending_until) * 1000000)::bigint,
                           'updated_at', (extract(epoch FROM s.updated_at) * 1000000)::bigint
                       )
                       ORDER BY s.dimension, s.variant)
            FROM work_item_statuses s
            WHERE s.work_item_id = c.id),
           '[]'::json
       ) AS dimensions
FROM claimed c
