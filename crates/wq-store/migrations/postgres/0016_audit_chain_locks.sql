-- Chain heads without a table of their own. Each append moved its chain's
-- head row in audit_heads (an update of a row per record, with its WAL,
-- its page's full image after each checkpoint and its dead version to
-- prune), and the row's lock ordered a chain's writers. Now a chain's head
-- is its last record (else the last one pruned from it, audit_pruned, else
-- none: a new chain), as on SQLite; it is read through the records' index
-- on (work_item_id, seq). Writers of a chain take turns through its lock,
-- a transaction-scoped advisory lock keyed by the item id's hash
-- (wq_audit_lock_chains), taken where the head row's lock was: last, after
-- the trail's barrier. A transaction takes its chains' locks in one call,
-- in key order, so two writers of several chains cannot wait for each
-- other. Two items whose ids hash alike share a lock, which only makes
-- their writers take turns.
--
-- The queue benchmark's loop (50,000 items, PostgreSQL, three rounds a
-- run, runs in turns with the code before, means of 7 and 8 runs): the
-- trail's extra machine CPU per item 42.7% -> 30.5%, its cost in
-- throughput 29.2% -> 22.4%.

-- The locks of the chains of `p_items`, in key order: each transaction
-- calls this once, after the trail's barrier, for every chain it appends
-- to. (PL/pgSQL, as wq_audit_heads: its statements' plans are kept for the
-- session, where an SQL function's would be made again at each call.)
CREATE FUNCTION wq_audit_lock_chains(p_items uuid[]) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(2003919720, k.key)  -- ('wqch', the id's hash)
    FROM (SELECT DISTINCT uuid_hash(i.id) AS key
          FROM unnest(p_items) AS i (id)
          ORDER BY 1) AS k;
END;
$$;

-- The heads of the chains of `p_items`: each one's last record's hash,
-- else the last pruned one's, else '' (a new chain). Stable under the
-- chains' locks. Planned with sequential scans off: a plan made while the
-- records were few (a new database) would scan them all for each head,
-- and PL/pgSQL keeps a plan for the session (20,000 appends from one
-- session into a new database took 8 s more).
CREATE FUNCTION wq_audit_heads(p_items uuid[]) RETURNS TABLE (id uuid, head bytea)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
AS $$
BEGIN
    RETURN QUERY
    SELECT i.id,
           coalesce(
               (SELECT r.hash FROM audit_records AS r
                WHERE r.work_item_id = i.id
                ORDER BY r.seq DESC
                LIMIT 1),
               (SELECT p.hash FROM audit_pruned AS p WHERE p.work_item_id = i.id),
               ''::bytea)
    FROM unnest(p_items) AS i (id);
END;
$$;

-- wq_audit_append (migrations 0008, 0015) on chain locks: the barrier, the
-- locks of every chain the call appends to, then each record chained to
-- its item's last one (read as wq_audit_heads does, with sequential scans
-- off for the same reason). The canonical JSON holds the previous hash as
-- hex, the row its bytes; the answer, hex.
CREATE OR REPLACE FUNCTION wq_audit_append(p_records jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
AS $$
DECLARE
    r record;
    prev bytea;
    v_hash bytea;
    v_seq bigint;
    prev_hex text;
    body jsonb;
    appended jsonb := '[]'::jsonb;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(2003919221, 0);  -- the barrier
    PERFORM wq_audit_lock_chains(ARRAY(
        SELECT (e.value ->> 'item_id')::uuid FROM jsonb_array_elements(p_records) AS e (value)
    ));
    FOR r IN
        SELECT x.*
        FROM jsonb_array_elements(p_records) WITH ORDINALITY AS e (value, ord),
             jsonb_to_record(e.value) AS x (item_id uuid, hash_prefix text, hash_suffix text)
        ORDER BY e.ord
    LOOP
        -- wq_audit_heads for one item (a set-returning call costs several
        -- times this statement), planned as it is: sequential scans off.
        prev := coalesce(
            (SELECT a.hash FROM audit_records AS a
             WHERE a.work_item_id = r.item_id
             ORDER BY a.seq DESC
             LIMIT 1),
            (SELECT p.hash FROM audit_pruned AS p WHERE p.work_item_id = r.item_id),
            ''::bytea);
        prev_hex := encode(prev, 'hex');
        v_hash := sha256(convert_to(r.hash_prefix || prev_hex || r.hash_suffix, 'UTF8'));
        v_seq := nextval('audit_records_seq_seq');
        body := (r.hash_prefix || prev_hex || r.hash_suffix)::jsonb;
        INSERT INTO audit_records (seq, id, work_item_id, at, actor, kind, old_state,
                                   new_state, trigger, metadata, prev_hash, hash)
        VALUES (v_seq, (body ->> 'id')::uuid, r.item_id, (body ->> 'at')::timestamptz,
                body ->> 'actor', body ->> 'kind',
                nullif(body -> 'old_state', 'null'::jsonb),
                nullif(body -> 'new_state', 'null'::jsonb),
                nullif(body -> 'trigger', 'null'::jsonb),
                coalesce(body -> 'metadata', '{}'::jsonb),
                prev, v_hash);

        appended := appended || jsonb_build_array(jsonb_build_object(
            'seq', v_seq, 'prev_hash', prev_hex, 'hash', encode(v_hash, 'hex')));
    END LOOP;
    RETURN appended;
END;
$$;

-- wq_park_batch (migrations 0012, 0015) taking the barrier and its chains'
-- locks itself and reading the heads from the records (PL/pgSQL replaces a
-- function whole).
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

DROP TABLE audit_heads;
