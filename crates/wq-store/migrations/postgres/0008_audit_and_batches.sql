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

-- $1: a JSON array of records, in order, each an object with id, item_id,
-- at, actor, kind, old_state, new_state, trigger, metadata, hash_prefix and
-- hash_suffix. Answers a JSON array of {seq, prev_hash, hash}, in order.
-- Call it last in a transaction: it locks each record's chain head.
CREATE FUNCTION wq_audit_append(p_records jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    r record;
    head record;
    appended jsonb := '[]'::jsonb;
BEGIN
    FOR r IN
        SELECT x.*
        FROM jsonb_array_elements(p_records) WITH ORDINALITY AS e (value, ord),
             jsonb_to_record(e.value)
                 AS x (id uuid, item_id uuid, at timestamptz, actor text, kind text,
                       old_state jsonb, new_state jsonb, trigger jsonb, metadata jsonb,
                       hash_prefix text, hash_suffix text)
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

        INSERT INTO audit_records (seq, id, work_item_id, at, actor, kind, old_state,
                                   new_state, trigger, metadata, prev_hash, hash)
        VALUES (head.seq, r.id, r.item_id, r.at, r.actor, r.kind,
                nullif(r.old_state, 'null'::jsonb), nullif(r.new_state, 'null'::jsonb),
                nullif(r.trigger, 'null'::jsonb), coalesce(r.metadata, '{}'::jsonb),
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
