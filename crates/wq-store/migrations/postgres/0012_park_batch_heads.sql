-- wq_park_batch (migration 0009) reads the parked items' chain heads with
-- a join from the given ids instead of two `= ANY (array)` filters on
-- audit_heads. The planner could not tell how many rows those filters
-- keep, guessed one, and could choose to read every chain head (one per
-- item ever audited) once per batch: auto_explain showed a parallel
-- sequential scan of 50,000 heads taking 9.7 of the statement's 24.2 ms
-- for a batch of 250 parks. From the ids the planner knows how many heads
-- it looks for: there it reads them through the index (0.4 ms); only
-- while the table is small (some 10,000 heads) does it prefer hashing
-- them all, which is then the cheaper plan. Queue benchmark, 50,000
-- items, before and after in turns: the batch statement 14.5-15.0 ms on
-- average with the audit trail, 12.2-12.9 ms after; the loop 15,481 items
-- per second (mean of four) before, 16,398 after. The rest of the body is
-- 0009's, unchanged: PL/pgSQL replaces a function whole.
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
    waiting uuid[];
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
    -- events are pending, in one update (which locks it).
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
        RETURNING w.id
    )
    SELECT coalesce(array_agg(updated.id), '{}') INTO held FROM updated;
    written := ARRAY(
        SELECT p.id
        FROM unnest(p_ids, p_writes) AS p (id, write)
        WHERE p.write AND p.id = ANY (held)
    );

    -- The outcomes' dimension rows: those with a detail replace it...
    INSERT INTO work_item_statuses (
        work_item_id, dimension, variant, status, detail, pending_until, updated_at
    )
    SELECT d.item, d.dimension, d.variant, d.status, d.detail::jsonb, d.pending_until, d.now
    FROM unnest(d_items, d_dimensions, d_variants, d_statuses, d_details, d_pending, d_nows)
         AS d (item, dimension, variant, status, detail, pending_until, now)
    WHERE d.item = ANY (written)
      AND d.detail IS NOT NULL
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
    WHERE d.item = ANY (written)
      AND d.detail IS NULL
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
      AND p.id = ANY (held)
      AND NOT p.id = ANY (waiting)
      AND s.pending_until IS NOT NULL
      AND (
          s.pending_until <= p.now
          OR NOT EXISTS (SELECT 1 FROM work_items AS w WHERE w.id = p.id AND w.phase = 'active')
      );

    -- The chain heads of the written outcomes the caller records, read
    -- (the caller's append locks and moves them).
    RETURN QUERY
    SELECT x.id, NOT x.id = ANY (waiting), NULL::text
    FROM unnest(held) AS x (id)
    UNION ALL
    SELECT a.work_item_id, NULL::boolean, a.hash
    FROM unnest(p_chained) AS c (id)
    JOIN audit_heads AS a ON a.work_item_id = c.id
    WHERE c.id = ANY (written);
END;
$$;
