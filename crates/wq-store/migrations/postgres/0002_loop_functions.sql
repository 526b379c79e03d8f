-- The loop's exit step as one function, so it costs one round trip instead of
-- seven (BEGIN, lock, check, outcome, park, timers, COMMIT). SQLite runs the
-- same steps as an in-process transaction (its migration of this name is
-- empty).
--
-- In order, in the caller's transaction:
-- 1. the item's advisory lock (DDR-34): event_insert holds it while it
--    inserts, so the check in step 4 sees every event committed before;
-- 2. the lease check: only the holder may write (else 'lease_lost');
-- 3. the last executor's outcome, if any: attempts 0, phase, error,
--    dimension upserts (a missing "detail" keeps the stored one);
-- 4. pending events → 'events_pending' (the outcome stays written, the lease
--    kept);
-- 5. park (DDR-49): actionable = false, lease released, consumed timers
--    cleared (expired ones, and all of an item that is no longer active)
--    → 'parked'.
-- A VOLATILE plpgsql function takes a new snapshot per statement under READ
-- COMMITTED, so step 4 runs after the lock is granted.
CREATE FUNCTION wq_park(
    p_id uuid,
    p_lease timestamptz,
    p_now timestamptz,
    p_lock_key bigint,
    p_write_outcome boolean,
    p_phase text,
    p_error text,
    p_dimensions jsonb
) RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    update_row record;
BEGIN
    PERFORM pg_advisory_xact_lock(p_lock_key);

    PERFORM 1 FROM work_items WHERE id = p_id AND leased_until = p_lease FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'lease_lost';
    END IF;

    IF p_write_outcome THEN
        UPDATE work_items
        SET attempts = 0,
            phase = coalesce(p_phase, phase),
            error = p_error,
            updated_at = p_now
        WHERE id = p_id;
        FOR update_row IN
            SELECT d.dimension, d.variant, d.status, d.detail, d.pending_until
            FROM jsonb_to_recordset(p_dimensions)
                 AS d (dimension text, variant text, status text, detail jsonb,
                       pending_until timestamptz)
        LOOP
            INSERT INTO work_item_statuses (
                work_item_id, dimension, variant, status, detail, pending_until, updated_at
            )
            VALUES (p_id, update_row.dimension, update_row.variant, update_row.status,
                    coalesce(update_row.detail, '{}'::jsonb), update_row.pending_until, p_now)
            ON CONFLICT (work_item_id, dimension, variant) DO UPDATE
            SET status = excluded.status,
                detail = coalesce(update_row.detail, work_item_statuses.detail),
                pending_until = excluded.pending_until,
                updated_at = excluded.updated_at;
        END LOOP;
    END IF;

    IF EXISTS (SELECT 1 FROM pending_events WHERE work_item_id = p_id) THEN
        RETURN 'events_pending';
    END IF;

    UPDATE work_items
    SET actionable = false,
        leased_until = NULL
    WHERE id = p_id;

    UPDATE work_item_statuses
    SET pending_until = NULL
    WHERE work_item_id = p_id
      AND pending_until IS NOT NULL
      AND (
          pending_until <= p_now
          OR NOT EXISTS (SELECT 1 FROM work_items WHERE id = p_id AND phase = 'active')
      );

    RETURN 'parked';
END;
$$;
