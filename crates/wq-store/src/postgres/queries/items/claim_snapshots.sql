-- Claims many items (each as items/claim_snapshot.sql does) and returns
-- each claimed one as items/snapshot.sql does, in one statement: for claims
-- that arrive together from different workers. $1 ids, $2 each one's now,
-- $3 each one's lease_until, $4 handled types. Ids must be distinct. Each
-- claim draws its item's next lease epoch.
--
-- As in claim_snapshot.sql, a row changed since the statement's snapshot is
-- not claimed (xmin check). Rows another transaction holds are skipped
-- rather than waited for (a single claim would wait, then find the row
-- changed and not claim it either), so two batches that want the same rows
-- never wait on each other in a cycle. `FOR NO KEY UPDATE` is the lock an
-- UPDATE of these columns takes; it does not conflict with the key-share
-- locks that inserts referencing the item take.
WITH wanted AS (
    SELECT r.id, r.now, r.lease_until, w.xmin AS seen
    FROM unnest($1::uuid[], $2::timestamptz[], $3::timestamptz[]) AS r (id, now, lease_until)
    JOIN work_items w ON w.id = r.id
),
locked AS (
    SELECT i.id, wanted.lease_until
    FROM work_items i
    JOIN wanted ON wanted.id = i.id
    WHERE (i.leased_until IS NULL OR i.leased_until <= wanted.now)  -- unleased, or the lease expired
      AND i.item_type = ANY($4::text[])                             -- only types this process handles
      AND i.xmin = wanted.seen                                      -- not changed since the snapshot
    FOR NO KEY UPDATE OF i SKIP LOCKED
),
claimed AS (
    UPDATE work_items i
    SET leased_until = locked.lease_until,
        lease_epoch = i.lease_epoch + 1
    FROM locked
    WHERE i.id = locked.id
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
