-- Up to ?3 items that are due, as the sweep finds them (DDR-25, DDR-35,
-- DDR-48, DDR-49): actionable and not leased, with undrained events, or
-- active with an expired timer; only of the handled types (?1, a JSON array
-- of strings); not leased at ?2 (µs). Oldest first on the actionable branch
-- (the partial index is in id order, and ids are UUIDv7), and there only
-- ids after ?4 (the last id an engine draining a backlog claimed; NULL:
-- from the start). Answers one row:
-- the items with their dimensions and whether events wait, as a JSON array
-- (one row, not one per item and dimension: each row crosses from sqlx's
-- worker thread on its own). Run in the writer's transaction, then
-- items/claim_ids.sql leases exactly these items. The unary + and CROSS
-- JOIN keep the plan on the small indexes, as in sweep/candidates.sql.
WITH handled (item_type) AS (
    SELECT value FROM json_each(?1)
),
-- (a) actionable and unleased. Index: work_items_actionable (partial,
-- WHERE actionable), in id order.
actionable AS (
    SELECT w.id
    FROM work_items AS w
    WHERE w.actionable                                      -- the partial index's predicate
      AND w.id > coalesce(?4, '')                           -- after the cursor
      AND (w.leased_until IS NULL OR w.leased_until <= ?2)  -- not leased (or the lease expired)
      AND +w.item_type IN (SELECT item_type FROM handled)   -- handled types only
    ORDER BY w.id
    LIMIT ?3
),
-- (b) undrained events, any phase (a non-active item's events still need
-- discarding). Index: pending_events_work_item_id (covering).
with_events AS (
    SELECT DISTINCT e.work_item_id AS id
    FROM pending_events AS e
    CROSS JOIN work_items AS w
    WHERE w.id = e.work_item_id                             -- primary-key lookup
      AND (w.leased_until IS NULL OR w.leased_until <= ?2)  -- not leased
      AND +w.item_type IN (SELECT item_type FROM handled)   -- handled types only
    LIMIT ?3
),
-- (c) active with an expired timer (DDR-48). Index:
-- work_item_statuses_pending_until (partial, covering range scan).
expired_timers AS (
    SELECT DISTINCT s.work_item_id AS id
    FROM work_item_statuses AS s
    CROSS JOIN work_items AS w
    WHERE s.pending_until IS NOT NULL                       -- the partial index's predicate
      AND s.pending_until <= ?2                             -- the timer expired
      AND w.id = s.work_item_id                             -- primary-key lookup
      AND +w.phase = 'active'                               -- only active items act on timers
      AND (w.leased_until IS NULL OR w.leased_until <= ?2)  -- not leased
      AND +w.item_type IN (SELECT item_type FROM handled)   -- handled types only
    LIMIT ?3
),
due (id) AS (
    SELECT id FROM actionable
    UNION
    SELECT id FROM with_events
    UNION
    SELECT id FROM expired_timers
    LIMIT ?3
)
SELECT json_group_array(json_object(
           'id', w.id,
           'item_type', w.item_type,
           'phase', w.phase,
           'actionable', w.actionable,
           'attempts', w.attempts,
           'error', w.error,
           'idempotency_key', w.idempotency_key,
           'caller_identity', w.caller_identity,
           'created_at', w.created_at,
           'updated_at', w.updated_at,
           'last_event_at', w.last_event_at,
           'lease_epoch', w.lease_epoch,
           'has_events', EXISTS (SELECT 1 FROM pending_events AS e WHERE e.work_item_id = w.id),
           'dimensions', (
               SELECT json_group_array(json_object(
                          'dimension', s.dimension,
                          'variant', s.variant,
                          'status', s.status,
                          'detail', json(s.detail),
                          'pending_until', s.pending_until,
                          'updated_at', s.updated_at))
               FROM (SELECT * FROM work_item_statuses AS d
                     WHERE d.work_item_id = w.id
                     ORDER BY d.dimension, d.variant) AS s
           ))) AS items
FROM due
CROSS JOIN work_items AS w
WHERE w.id = due.id
