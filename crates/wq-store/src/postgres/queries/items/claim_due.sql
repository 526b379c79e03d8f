-- Claims up to $3 items that are due, as the sweep finds them (DDR-25,
-- DDR-35, DDR-48, DDR-49): actionable and not leased, with undrained events,
-- or active with an expired timer; only of the handled types ($1); not
-- leased at $2; on the actionable branch only ids after $5 (an engine
-- draining a backlog passes the last id it claimed, so the scan does not
-- walk again over the index entries its earlier claims left behind; NULL:
-- from the start). Each gets the lease $4 (and its next lease epoch) and is returned as
-- items/snapshot.sql returns an item, in one statement: how an engine takes
-- a batch of work.
--
-- Several engines run this at once: the actionable branch locks the rows
-- it takes as it scans, skipping rows another claimer holds, so each engine
-- gets other items (oldest first: the partial index is in id order, ids are
-- UUIDv7) instead of all of them waiting on one. A row changed by a commit
-- that landed after the statement's snapshot is not claimed (its locked
-- version is not the one the snapshot reads), as in claim_snapshot.sql:
-- its dimensions here would be older than the row.
WITH actionable AS (
    -- (a) actionable and unleased. Index: work_items_actionable (partial,
    -- WHERE actionable), in id order.
    SELECT w.id, w.xmin::text AS locked
    FROM work_items AS w
    WHERE w.actionable                                      -- the partial index's predicate
      AND w.id > coalesce($5, '00000000-0000-0000-0000-000000000000'::uuid)  -- after the cursor
      AND (w.leased_until IS NULL OR w.leased_until <= $2)  -- not leased (or the lease expired)
      AND w.item_type = ANY($1::text[])                     -- handled types only
    ORDER BY w.id
    LIMIT $3
    FOR NO KEY UPDATE OF w SKIP LOCKED
),
late AS (
    -- (b) undrained events, any phase, and (c) active with an expired
    -- timer (DDR-48), found in their small indexes as the sweep finds them,
    -- then locked. Rare: an event wakes its item (a), and parking clears
    -- consumed timers.
    SELECT w.id, w.xmin::text AS locked
    FROM work_items AS w
    WHERE w.id = ANY (ARRAY(
            SELECT e.work_item_id FROM pending_events AS e
            UNION
            -- Ordered by the index's key: a generic plan (which estimates
            -- a third of the rows expired) would otherwise read every
            -- dimension row to find none.
            (SELECT s.work_item_id
             FROM work_item_statuses AS s
             WHERE s.pending_until IS NOT NULL                -- the partial index's predicate
               AND s.pending_until <= $2                      -- the timer expired
             ORDER BY s.pending_until)
          ))
      AND (w.leased_until IS NULL OR w.leased_until <= $2)  -- not leased
      AND w.item_type = ANY($1::text[])                     -- handled types only
      AND (w.phase = 'active'                               -- timers only wake active items,
           OR EXISTS (SELECT 1 FROM pending_events AS e     -- events any item
                      WHERE e.work_item_id = w.id))
    LIMIT $3
    FOR NO KEY UPDATE OF w SKIP LOCKED
),
due AS (
    SELECT id, locked FROM actionable
    UNION
    SELECT id, locked FROM late
    LIMIT $3
),
claimed AS (
    UPDATE work_items AS i
    SET leased_until = $4,
        lease_epoch = i.lease_epoch + 1
    FROM due
    WHERE i.id = due.id
      AND due.locked = (SELECT s.xmin::text FROM work_items AS s WHERE s.id = due.id)  -- not changed since the snapshot
    RETURNING i.id, i.item_type, i.phase, i.actionable, i.attempts, i.error, i.leased_until,
              i.idempotency_key, i.caller_identity, i.created_at, i.updated_at, i.last_event_at, i.lease_epoch
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
