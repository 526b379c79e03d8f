-- wq_park_batch (migrations 0012, 0015, 0016) without a subquery per
-- timer row and with one pass over the items' update for every set the
-- later steps test. The consumed timers' update asked, for every timer row
-- of a parked item, whether the item is still active (a subquery per row);
-- the update of the items now returns each one's phase and whether it was
-- parked, and the timers of the items no longer active come from that
-- answer, as do the held, written and parked id sets (the written set was
-- a statement of its own). Membership stays `= ANY (array)`: with the
-- arrays as parameters of a generic plan, `IN (SELECT unnest(array))` is
-- planned as a nested loop that unnests the array again for every row,
-- fifteen times slower for a batch of 256 than comparing with each
-- element. Same arguments, same answer, same locks in the same order.
CREATE OR REPLACE FUNCTION wq_park_batch(
    p_ids uuid[],
    p_leases timestamptz[],
    p_nows timestamptz[],
    p_writes boolean[],
    p_phases text[],
    p_errors text[],
    p_lock_keys bigint[],
    d_items uuid[],
    d_dimensions text[],
    d_variants text[],
    d_statuses text[],
    d_details text[],
    d_pending timestamptz[],
    d_nows timestamptz[],
    p_chained uuid[]
) RETURNS TABLE (id uuid, parked boolean, head text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    held uuid[];
    written uuid[];
    settled uuid[];
    inactive uuid[];
    waiting uuid[];
    chained uuid[];
BEGIN
    PERFORM pg_advisory_xact_lock(k.key)
    FROM (SELECT DISTINCT u.key FROM unnest(p_lock_keys) AS u (key) ORDER BY u.key) AS k;

    -- No event can commit for these items now (their advisory locks are
    -- ours, DDR-34); what committed before is seen here.
    waiting := ARRAY(
        SELECT DISTINCT e.work_item_id
        FROM pending_events AS e
        WHERE e.work_item_id = ANY (p_ids)
    );

    -- Each row whose lease is still ours: its outcome, and its park unless
    -- events are pending, in one update (which locks it). It answers which
    -- rows it held, which of them took their outcome, which are parked and
    -- which are no longer active.
    WITH updated AS (
        UPDATE work_items AS w
        SET attempts = CASE WHEN p.write THEN 0 ELSE w.attempts END,
            phase = CASE WHEN p.write THEN coalesce(p.phase, w.phase) ELSE w.phase END,
            error = CASE WHEN p.write THEN p.error ELSE w.error END,
            updated_at = CASE WHEN p.write THEN p.now ELSE w.updated_at END,
            actionable = CASE WHEN p.id = ANY (waiting) THEN w.actionable ELSE false END,
            leased_until = CASE WHEN p.id = ANY (waiting) THEN w.leased_until ELSE NULL END
        FROM unnest(p_ids, p_leases, p_nows, p_writes, p_phases, p_errors)
             AS p (id, lease, now, write, phase, error)
        WHERE w.id = p.id
          AND w.leased_until = p.lease  -- still our lease
        RETURNING w.id, p.write, w.phase, w.leased_until IS NULL AS settled
    )
    SELECT coalesce(array_agg(u.id), '{}'),
           coalesce(array_agg(u.id) FILTER (WHERE u.write), '{}'),
           coalesce(array_agg(u.id) FILTER (WHERE u.settled), '{}'),
           coalesce(array_agg(u.id) FILTER (WHERE u.settled AND u.phase <> 'active'), '{}')
    INTO held, written, settled, inactive
    FROM updated AS u;

    -- The outcomes' dimension rows: those with a detail replace it...
    INSERT INTO work_item_statuses (
        work_item_id, dimension, variant, status, detail, pending_until, updated_at
    )
    SELECT d.item, d.dimension, d.variant, d.status, d.detail::jsonb, d.pending_until, d.now
    FROM unnest(d_items, d_dimensions, d_variants, d_statuses, d_details, d_pending, d_nows)
         AS d (item, dimension, variant, status, detail, pending_until, now)
    WHERE d.detail IS NOT NULL
      AND d.item = ANY (written)
    ON CONFLICT (work_item_id, dimension, variant) DO UPDATE
    SET status = excluded.status,
        detail = excluded.detail,
        pending_until = excluded.pending_until,
        updated_at = excluded.updated_at;
    -- ... those without keep it ('{}' for a new row).
    INSERT INTO work_item_statuses (
        work_item_id, dimension, variant, status, detail, pending_until, updated_at
    )
    SELECT d.item, d.dimension, d.variant, d.status, '{}'::jsonb, d.pending_until, d.now
    FROM unnest(d_items, d_dimensions, d_variants, d_statuses, d_details, d_pending, d_nows)
         AS d (item, dimension, variant, status, detail, pending_until, now)
    WHERE d.detail IS NULL
      AND d.item = ANY (written)
    ON CONFLICT (work_item_id, dimension, variant) DO UPDATE
    SET status = excluded.status,
        pending_until = excluded.pending_until,
        updated_at = excluded.updated_at;

    -- Consumed timers of the parked items: expired ones, and every one of
    -- an item that is no longer active.
    UPDATE work_item_statuses AS s
    SET pending_until = NULL
    FROM unnest(p_ids, p_nows) AS p (id, now)
    WHERE s.work_item_id = p.id
      AND p.id = ANY (settled)
      AND s.pending_until IS NOT NULL
      AND (s.pending_until <= p.now OR p.id = ANY (inactive));

    -- The chains of the written outcomes the caller records: the trail's
    -- barrier (shared), then each chain's lock (wq_audit_lock_chains), the
    -- last locks this transaction takes; then their heads, which no other
    -- writer can move until it ends.
    chained := ARRAY(
        SELECT c.id FROM unnest(p_chained) AS c (id) WHERE c.id = ANY (written)
    );
    IF cardinality(chained) > 0 THEN
        PERFORM pg_advisory_xact_lock_shared(2003919221, 0);  -- the barrier
        PERFORM wq_audit_lock_chains(chained);
    END IF;

    RETURN QUERY
    SELECT x.id, NOT x.id = ANY (waiting), NULL::text
    FROM unnest(held) AS x (id)
    UNION ALL
    SELECT h.id, NULL::boolean, encode(h.head, 'hex')
    FROM wq_audit_heads(chained) AS h;
END;
$$;
