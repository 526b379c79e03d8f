-- The audit trail's cost per record: hashes as bytes, and an archive
-- cursor instead of a mark and an index entry on every record.
--
-- Hashes as their 32 bytes (bytea) instead of 64 hexadecimal characters,
-- in the records, the chain heads and the pruned heads. Hex text is what
-- the store's callers see and what a record's canonical JSON (its hash's
-- input) holds: statements convert at the edge (encode on the way out,
-- decode on the way in), so nothing outside the SQL changes. Each record
-- and each move of a chain head write 64 bytes less (130 bytes of text
-- against 66 of bytea per row), and more heads fit on a page, so more of
-- their moves stay heap-only. WAL of the loop's trail, 50,000 records
-- chained by the batch append after their items' first, with the cursor
-- below: 969 bytes a record before, 761 after (pg_waldump: the record's
-- insert 455 -> 391, the head's move 209 -> 159, B-tree entries 3.3 ->
-- 2.2 a record).
ALTER TABLE audit_records
    ALTER COLUMN prev_hash TYPE bytea USING decode(prev_hash, 'hex'),
    ALTER COLUMN hash TYPE bytea USING decode(hash, 'hex');
ALTER TABLE audit_heads
    ALTER COLUMN prev_hash DROP DEFAULT,
    ALTER COLUMN prev_hash TYPE bytea USING decode(prev_hash, 'hex'),
    ALTER COLUMN prev_hash SET DEFAULT ''::bytea,
    ALTER COLUMN hash TYPE bytea USING decode(hash, 'hex');
ALTER TABLE audit_pruned
    ALTER COLUMN hash TYPE bytea USING decode(hash, 'hex');

-- The archive's cursor, as SQLite's (migration 0010): every record up to
-- `seq` was shipped. It replaces each record's `archived_at` and the
-- partial index of records not archived yet, which every append wrote
-- into and every shipped record left (an update of the whole row, index
-- entries included, for each record archived).
--
-- Sequence numbers are drawn in transactions that commit in their own
-- order, so the archiver only reads up to a horizon below which every
-- number drawn belongs to a finished transaction (wq_audit_horizon).
-- Each append holds the trail's barrier lock, shared, from before it
-- draws its numbers until its transaction ends; the archiver takes the
-- lock alone for a moment (it waits for the appends in progress, and new
-- ones wait behind it), reads how far the sequence went, and lets go.
-- Appends take the barrier after every other lock of their transaction
-- but the chain heads', which only appends take: no append holding the
-- barrier waits for a lock that a transaction waiting for the barrier
-- holds, so the archiver's wait ends when the appends in progress end.
CREATE TABLE audit_archived (
    singleton   integer PRIMARY KEY CHECK (singleton = 1),
    seq         bigint NOT NULL,
    archived_at timestamptz
);
-- From the records as they are: up to the oldest one not archived (the
-- archived ones above it, shipped out of order, are shipped again: the
-- archive is at least once), else up to the newest, else none.
INSERT INTO audit_archived (singleton, seq, archived_at)
VALUES (1,
        coalesce((SELECT min(seq) - 1 FROM audit_records WHERE archived_at IS NULL),
                 (SELECT max(seq) FROM audit_records),
                 0),
        (SELECT max(archived_at) FROM audit_records));
DROP FUNCTION wq_audit_unarchived(bigint);
DROP INDEX audit_records_unarchived;
ALTER TABLE audit_records DROP COLUMN archived_at;

-- The archiver's read of the oldest records not archived yet, up to
-- `p_horizon` (wq_audit_horizon), planned with sorting off as migration
-- 0014's was, for the same reason: with statistics that put the range at
-- a small share of the table (taken when it was empty, or when little was
-- waiting) the planner chose a bitmap scan of every record above the
-- cursor and a sort (150,000 records: 38 ms a batch of 1,000, against 1
-- in the primary key's order). With sorting off its only plan is the
-- ordered scan of the primary key, which stops after `n` rows.
CREATE FUNCTION wq_audit_unarchived(p_horizon bigint, n bigint) RETURNS SETOF audit_records
LANGUAGE sql STABLE
SET enable_sort = off
AS $$
    SELECT * FROM audit_records
    WHERE seq > (SELECT seq FROM audit_archived)
      AND seq <= p_horizon
    ORDER BY seq
    LIMIT n
$$;

-- The archiver's horizon: the highest sequence number drawn so far, once
-- every append in progress ended; NULL if they did not end within the
-- lock timeout (nothing new is read then, the next round tries again).
-- Appends that start meanwhile wait behind the archiver, so the timeout
-- is short: an append ends in milliseconds (the last steps of its
-- transaction and the commit), and one that does not holds back the
-- archive, never the other appends for more than the timeout. Call it
-- alone in its transaction (the lock lasts until it ends) and read the
-- records in the next one, whose snapshot sees every append that ended.
CREATE FUNCTION wq_audit_horizon() RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET lock_timeout = '100ms'
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(2003919221, 0);  -- the barrier ('wqau', 0)
    RETURN (SELECT CASE WHEN is_called THEN last_value ELSE 0 END
            FROM audit_records_seq_seq);
EXCEPTION WHEN lock_not_available THEN
    RETURN NULL;
END;
$$;

-- wq_audit_append (migration 0008) on bytea heads, holding the barrier:
-- the canonical JSON holds the previous hash as hex, the row its bytes;
-- the answer, hex.
CREATE OR REPLACE FUNCTION wq_audit_append(p_records jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    r record;
    head record;
    prev_hex text;
    body jsonb;
    appended jsonb := '[]'::jsonb;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(2003919221, 0);  -- the barrier
    FOR r IN
        SELECT x.*
        FROM jsonb_array_elements(p_records) WITH ORDINALITY AS e (value, ord),
             jsonb_to_record(e.value) AS x (item_id uuid, hash_prefix text, hash_suffix text)
        ORDER BY e.ord
    LOOP
        INSERT INTO audit_heads AS h (work_item_id, seq, prev_hash, hash)
        VALUES (
            r.item_id,
            nextval('audit_records_seq_seq'),
            ''::bytea,
            sha256(convert_to(r.hash_prefix || r.hash_suffix, 'UTF8'))
        )
        ON CONFLICT (work_item_id) DO UPDATE
        SET seq = nextval('audit_records_seq_seq'),
            prev_hash = h.hash,
            hash = sha256(convert_to(r.hash_prefix || encode(h.hash, 'hex') || r.hash_suffix,
                                     'UTF8'))
        RETURNING h.seq, h.prev_hash, h.hash INTO head;

        prev_hex := encode(head.prev_hash, 'hex');
        body := (r.hash_prefix || prev_hex || r.hash_suffix)::jsonb;
        INSERT INTO audit_records (seq, id, work_item_id, at, actor, kind, old_state,
                                   new_state, trigger, metadata, prev_hash, hash)
        VALUES (head.seq, (body ->> 'id')::uuid, r.item_id, (body ->> 'at')::timestamptz,
                body ->> 'actor', body ->> 'kind',
                nullif(body -> 'old_state', 'null'::jsonb),
                nullif(body -> 'new_state', 'null'::jsonb),
                nullif(body -> 'trigger', 'null'::jsonb),
                coalesce(body -> 'metadata', '{}'::jsonb),
                head.prev_hash, head.hash);

        appended := appended || jsonb_build_array(jsonb_build_object(
            'seq', head.seq, 'prev_hash', prev_hex, 'hash', encode(head.hash, 'hex')));
    END LOOP;
    RETURN appended;
END;
$$;

-- wq_park_batch (migration 0012) answering the chain heads it reads as hex,
-- the one change: PL/pgSQL replaces a function whole.
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
    SELECT a.work_item_id, NULL::boolean, encode(a.hash, 'hex')
    FROM unnest(p_chained) AS c (id)
    JOIN audit_heads AS a ON a.work_item_id = c.id
    WHERE c.id = ANY (written);
END;
$$;
