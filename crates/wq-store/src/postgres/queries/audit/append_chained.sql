-- Appends records the caller chained to the heads items/park_batch.sql
-- read, in order, and moves each chain's head to its last record: a head
-- is moved only if it is still the one the chain's first record follows,
-- and a new chain's head is created only if none was created meanwhile.
-- The caller compares `heads` (the heads moved or created) with the
-- number of chains and rolls back on a difference (another writer
-- appended to one of them first). $1..$11 one entry per record: id, item,
-- at, actor, kind, old_state, new_state, trigger, metadata (JSON text;
-- NULL for none), prev_hash, hash (hex, stored as their bytes: migration
-- 0015). The sequence numbers are drawn in that order, so a chain's
-- records are in seq order, the order verification walks. Answers each
-- record's id and seq, and `heads` on every row.
WITH appended AS (
    INSERT INTO audit_records (id, work_item_id, at, actor, kind, old_state, new_state,
                               trigger, metadata, prev_hash, hash)
    SELECT r.id, r.item, r.at, r.actor, r.kind, r.old_state::jsonb, r.new_state::jsonb,
           r.trigger::jsonb, r.metadata::jsonb, decode(r.prev_hash, 'hex'), decode(r.hash, 'hex')
    FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[], $4::text[], $5::text[], $6::text[],
                $7::text[], $8::text[], $9::text[], $10::text[], $11::text[])
         WITH ORDINALITY AS r (id, item, at, actor, kind, old_state, new_state, trigger, metadata,
                               prev_hash, hash, ord)
    ORDER BY r.ord
    RETURNING id, work_item_id, seq, prev_hash, hash
),
chains AS (
    SELECT work_item_id,
           (array_agg(prev_hash ORDER BY seq))[1] AS follows,
           (array_agg(seq ORDER BY seq DESC))[1] AS seq,
           (array_agg(prev_hash ORDER BY seq DESC))[1] AS prev_hash,
           (array_agg(hash ORDER BY seq DESC))[1] AS hash
    FROM appended
    GROUP BY work_item_id
),
moved AS (
    UPDATE audit_heads AS h
    SET seq = chains.seq, prev_hash = chains.prev_hash, hash = chains.hash
    FROM chains
    WHERE h.work_item_id = chains.work_item_id
      AND chains.follows <> ''::bytea
      AND h.hash = chains.follows  -- still the head the chain was built on
    RETURNING h.work_item_id
),
created AS (
    INSERT INTO audit_heads (work_item_id, seq, prev_hash, hash)
    SELECT work_item_id, seq, prev_hash, hash
    FROM chains
    WHERE follows = ''::bytea
    ON CONFLICT (work_item_id) DO NOTHING
    RETURNING work_item_id
)
SELECT id, seq,
       (SELECT count(*) FROM moved) + (SELECT count(*) FROM created) AS heads
FROM appended
