-- Items the sweep should notify (DDR-25, DDR-35, DDR-48, DDR-49): at most
-- $3 distinct ids of the handled types ($1) that are not leased at $2.
-- Every branch reads a small index, never the idle items: cost grows with
-- work to do, not with the table. Branches (b) and (c) look each candidate
-- up with a LATERAL ... LIMIT 1 subquery, which the planner cannot turn into
-- a hash or merge join over all of work_items (a generic plan, or stale
-- statistics on pending_until, once chose a merge join over every active
-- item).
(
    -- (a) actionable and unleased. Index: work_items_actionable (partial,
    -- WHERE actionable) holds only actionable rows.
    SELECT w.id
    FROM work_items AS w
    WHERE w.actionable                                      -- the partial index's predicate
      AND (w.leased_until IS NULL OR w.leased_until <= $2)  -- not leased (or the lease expired)
      AND w.item_type = ANY($1::text[])                     -- handled types only
    LIMIT $3
)
UNION
(
    -- (b) undrained events, any phase (a non-active item's events still need
    -- discarding). Index: pending_events_work_item_id (index-only scan); the
    -- table only holds undrained events.
    SELECT e.work_item_id
    FROM (SELECT DISTINCT work_item_id FROM pending_events) AS e
    CROSS JOIN LATERAL (
        SELECT 1
        FROM work_items AS w
        WHERE w.id = e.work_item_id                             -- primary-key lookup
          AND (w.leased_until IS NULL OR w.leased_until <= $2)  -- not leased
          AND w.item_type = ANY($1::text[])                     -- handled types only
        LIMIT 1
    ) AS unleased
    LIMIT $3
)
UNION
(
    -- (c) active with an expired timer (DDR-48). Index:
    -- work_item_statuses_pending_until (partial, WHERE pending_until IS NOT
    -- NULL; index-only range scan pending_until <= now). Parking clears
    -- consumed timers, so the expired range stays small.
    SELECT s.work_item_id
    FROM (
        SELECT DISTINCT work_item_id
        FROM work_item_statuses
        WHERE pending_until IS NOT NULL                     -- the partial index's predicate
          AND pending_until <= $2                           -- the timer expired
    ) AS s
    CROSS JOIN LATERAL (
        SELECT 1
        FROM work_items AS w
        WHERE w.id = s.work_item_id                             -- primary-key lookup
          AND w.phase = 'active'                                -- only active items act on timers
          AND (w.leased_until IS NULL OR w.leased_until <= $2)  -- not leased
          AND w.item_type = ANY($1::text[])                     -- handled types only
        LIMIT 1
    ) AS due
    LIMIT $3
)
LIMIT $3
