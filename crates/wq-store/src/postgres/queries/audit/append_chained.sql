-- Appends records the caller chained to heads it holds locked
-- (items/park_batch.sql), in order, and moves each chain's head to its
-- last record. $1..$11 one entry per record: id, item, at, actor, kind,
-- old_state, new_state, trigger, metadata (JSON text; NULL for none),
-- prev_hash, hash. The sequence numbers are drawn in that order, so a
-- chain's records are in seq order, the order verification walks.
-- Answers each record's id and seq.
WITH appended AS (
    INSERT INTO audit_records (id, work_item_id, at, actor, kind, old_state, new_state,
                               trigger, metadata, prev_hash, hash)
    SELECT r.id, r.item, r.at, r.actor, r.kind, r.old_state::jsonb, r.new_state::jsonb,
           r.trigger::jsonb, r.metadata::jsonb, r.prev_hash, r.hash
    FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[], $4::text[], $5::text[], $6::text[],
                $7::text[], $8::text[], $9::text[], $10::text[], $11::text[])
         WITH ORDINALITY AS r (id, item, at, actor, kind, old_state, new_state, trigger, metadata,
                               prev_hash, hash, ord)
    ORDER BY r.ord
    RETURNING id, work_item_id, seq, prev_hash, hash
),
last AS (
    SELECT DISTINCT ON (work_item_id) work_item_id, seq, prev_hash, hash
    FROM appended
    ORDER BY work_item_id, seq DESC
),
moved AS (
    UPDATE audit_heads AS h
    SET seq = last.seq, prev_hash = last.prev_hash, hash = last.hash
    FROM last
    WHERE h.work_item_id = last.work_item_id
)
SELECT id, seq FROM appended
