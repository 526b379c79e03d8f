-- The audit trail and the loop's exit in one round trip. Appending a record
-- took two statements (lock the chain head, then insert and move the head),
-- and the loop's exit with an outcome took a transaction around wq_park and
-- those appends. Now wq_audit_append appends any number of records in one
-- call, chaining each in SQL; wq_park_audited is wq_park followed by the
-- appends of its outcome, as one statement that commits alone; and
-- wq_park_many parks many items (from different workers) in one statement.
--
-- A record's hash is the SHA-256 of its canonical JSON, in which `prev_hash`
-- is the only part the caller cannot know before the chain head is locked.
-- The caller sends that text cut around the previous hash (`hash_prefix`,
-- `hash_suffix`); the function joins them with the head's hash.
--
-- The head row also keeps the hash before its last record (`prev_hash`), so
-- one upsert both locks the head and moves it: its RETURNING answers the
-- previous hash, the new one and the record's sequence number. That number
-- is drawn once the head is locked (in DO UPDATE, not in VALUES, which is
-- evaluated before the upsert waits for a concurrent writer's lock), so a
-- chain's records are in `seq` order, the order verification walks.
ALTER TABLE audit_heads ADD COLUMN prev_hash text NOT NULL DEFAULT '';

-- Fewer indexes to maintain on every append: nothing looks a record up by
-- its id (a UUIDv7, unique by construction and covered by the chain's
-- hashes), and only the prune step filters on `at` alone, which a BRIN
-- index serves (records arrive in time order) at a fraction of a B-tree's
-- cost per insert.
ALTER TABLE audit_records DROP CONSTRAINT audit_records_id_key;
DROP INDEX audit_records_at;
CREATE INDEX audit_records_at ON audit_records USING brin (at);

-- Room on each page for the loop's updates of a row to stay on its page
-- (heap-only when no indexed column changes, as a claim's lease), for rows
-- written from now on.
ALTER TABLE work_items SET (fillfactor = 80);
ALTER TABLE work_item_statuses SET (fillfactor = 80);

-- wq_park (migration 0002) as before, with one update of the item's row
-- instead of two: the outcome and the park are written together. The
-- pending-events check moves before them, which changes nothing: the
-- advisory lock, held since the start, keeps any event from committing in
-- between.
CREATE OR REPLACE FUNCTION wq_park(
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
    events_pending boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(p_lock_key);

    PERFORM 1 FROM work_items WHERE id = p_id AND leased_until = p_lease FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'lease_lost';
    END IF;

    IF p_write_outcome THEN
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

    events_pending := EXISTS (SELECT 1 FROM pending_events WHERE work_item_id = p_id);

    IF p_write_outcome THEN
        UPDATE work_items
        SET attempts = 0,
            phase = coalesce(p_phase, phase),
            error = p_error,
            updated_at = p_now,
            actionable = CASE WHEN events_pending THEN actionable ELSE false END,
            leased_until = CASE WHEN events_pending THEN leased_until ELSE NULL END
        WHERE id = p_id;
    ELSIF NOT events_pending THEN
        UPDATE work_items
        SET actionable = false,
            leased_until = NULL
        WHERE id = p_id;
    END IF;

    IF events_pending THEN
        RETURN 'events_pending';
    END IF;

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

-- $1: a JSON array of records, in order, each an object with the item's id
-- (`item_id`) and the record's canonical JSON cut around the previous hash
-- (`hash_prefix`, `hash_suffix`). The joined text is both what is hashed
-- and, parsed, the record's fields: each is sent once. Answers a JSON array
-- of {seq, prev_hash, hash}, in order. Call it last in a transaction: it
-- locks each record's chain head.
CREATE FUNCTION wq_audit_append(p_records jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    r record;
    head record;
    body jsonb;
    appended jsonb := '[]'::jsonb;
BEGIN
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
            '',
            encode(sha256(convert_to(r.hash_prefix || r.hash_suffix, 'UTF8')), 'hex')
        )
        ON CONFLICT (work_item_id) DO UPDATE
        SET seq = nextval('audit_records_seq_seq'),
            prev_hash = h.hash,
            hash = encode(sha256(convert_to(r.hash_prefix || h.hash || r.hash_suffix, 'UTF8')),
                          'hex')
        RETURNING h.seq, h.prev_hash, h.hash INTO head;

        body := (r.hash_prefix || head.prev_hash || r.hash_suffix)::jsonb;
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
            'seq', head.seq, 'prev_hash', head.prev_hash, 'hash', head.hash));
    END LOOP;
    RETURN appended;
END;
$$;

-- wq_park, then (unless the lease was lost) the outcome's records, in one
-- statement: the park's locks come first, the chain heads' last. Answers
-- {"answer": wq_park's answer, "records": wq_audit_append's answer}.
CREATE FUNCTION wq_park_audited(
    p_id uuid,
    p_lease timestamptz,
    p_now timestamptz,
    p_lock_key bigint,
    p_write_outcome boolean,
    p_phase text,
    p_error text,
    p_dimensions jsonb,
    p_records jsonb
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    answer text;
BEGIN
    answer := wq_park(p_id, p_lease, p_now, p_lock_key, p_write_outcome, p_phase, p_error,
                      p_dimensions);
    IF answer = 'lease_lost' THEN
        RETURN jsonb_build_object('answer', answer, 'records', '[]'::jsonb);
    END IF;
    RETURN jsonb_build_object('answer', answer, 'records', wq_audit_append(p_records));
END;
$$;

-- Many parks in one statement (one round trip, one commit), for parks that
-- arrive together from different workers: first every wq_park, in the
-- order given (the caller sorts by lock key, so two such batches take their
-- advisory locks in one order), then each parked item's records, so the
-- chain heads' locks still come last. An item whose lease was lost wrote
-- nothing and gets no records. $1: a JSON array of {id, lease, now,
-- lock_key, write_outcome, phase, error, dimensions, records}; answers a
-- JSON array of wq_park_audited's answers, in order.
CREATE FUNCTION wq_park_many(p_parks jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    p record;
    answers text[] := '{}';
    results jsonb := '[]'::jsonb;
    i integer := 0;
BEGIN
    FOR p IN
        SELECT x.*
        FROM jsonb_array_elements(p_parks) WITH ORDINALITY AS e (value, ord),
             jsonb_to_record(e.value)
                 AS x (id uuid, lease timestamptz, now timestamptz, lock_key bigint,
                       write_outcome boolean, phase text, error text, dimensions jsonb)
        ORDER BY e.ord
    LOOP
        answers := answers || wq_park(p.id, p.lease, p.now, p.lock_key, p.write_outcome,
                                      p.phase, p.error, p.dimensions);
    END LOOP;
    FOR p IN
        SELECT e.value -> 'records' AS records
        FROM jsonb_array_elements(p_parks) WITH ORDINALITY AS e (value, ord)
        ORDER BY e.ord
    LOOP
        i := i + 1;
        results := results || jsonb_build_array(jsonb_build_object(
            'answer', answers[i],
            'records', CASE WHEN answers[i] = 'lease_lost' THEN '[]'::jsonb
                            ELSE wq_audit_append(p.records) END));
    END LOOP;
    RETURN results;
END;
$$;
