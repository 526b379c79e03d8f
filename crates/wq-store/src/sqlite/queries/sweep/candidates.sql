-- Items the sweep should notify (DDR-25, DDR-35, DDR-48, DDR-49): at most
-- ?3 distinct ids of the handled types (?1, a JSON array of strings) that are
-- not leased at ?2 (µs). Every branch reads a small index, never the idle
-- items: cost grows with work to do, not with the table.
-- Without ANALYZE statistics SQLite would rather walk work_items_type_phase_id
-- (every item of a handled type), so the unary + keeps item_type and phase
-- off the indexes, and CROSS JOIN fixes the small table as the outer loop.
WITH handled (item_type) AS (
    SELECT value FROM json_each(?1)
),
-- (a) actionable and unleased. Index: work_items_actionable (partial,
-- WHERE actionable) holds only actionable rows.
actionable AS (
    SELECT w.id
    FROM work_items AS w
    WHERE w.actionable                                      -- the partial index's predicate
      AND (w.leased_until IS NULL OR w.leased_until <= ?2)  -- not leased (or the lease expired)
      AND +w.item_type IN (SELECT item_type FROM handled)   -- handled types only
    LIMIT ?3
),
-- (b) undrained events, any phase (a non-active item's events still need
-- discarding). Index: pending_events_work_item_id (covering); the table only
-- holds undrained events. Then a primary-key lookup per event.
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
-- work_item_statuses_pending_until (partial, WHERE pending_until IS NOT NULL;
-- covering range scan pending_until <= now); parking clears consumed timers,
-- so the range stays small. Then a primary-key lookup per row.
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
)
SELECT id FROM actionable
UNION
SELECT id FROM with_events
UNION
SELECT id FROM expired_timers
LIMIT ?3
