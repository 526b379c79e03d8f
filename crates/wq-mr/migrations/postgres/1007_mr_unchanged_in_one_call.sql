-- An unchanged submission writes two rows: its line in the submission
-- history and its audit record. As two statements that is two round trips
-- on a transaction that otherwise only reads, and the second was most of
-- what the trail cost an unchanged submission. This function writes both
-- in one call: the history's row first, then the record through
-- wq_audit_append_record (wq-store's migration 0018), so that the row's
-- foreign-key check (run at the end of its statement, as PL/pgSQL runs
-- each) comes before the trail's barrier and the chain's lock, which stays
-- the last lock the transaction takes. Its answer is the record's, as
-- wq_audit_append_record's.
CREATE FUNCTION mr_record_unchanged(
    p_item uuid,
    p_generation bigint,
    p_content_hash text,
    p_caller text,
    p_at timestamptz,
    r_id uuid,
    r_item uuid,
    r_at timestamptz,
    r_actor text,
    r_kind text,
    r_old_state text,
    r_new_state text,
    r_trigger text,
    r_metadata text,
    r_prefix text,
    r_suffix text,
    OUT o_seq bigint,
    OUT o_prev_hash text,
    OUT o_hash text)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    INSERT INTO mr_submissions (
        work_item_id, generation, content_hash, outcome, caller_identity, submitted_at
    ) VALUES (p_item, p_generation, p_content_hash, 'unchanged', p_caller, p_at);
    SELECT a.o_seq, a.o_prev_hash, a.o_hash
    INTO o_seq, o_prev_hash, o_hash
    FROM wq_audit_append_record(r_id, r_item, r_at, r_actor, r_kind, r_old_state,
                                r_new_state, r_trigger, r_metadata, r_prefix,
                                r_suffix) AS a;
END;
$$;
