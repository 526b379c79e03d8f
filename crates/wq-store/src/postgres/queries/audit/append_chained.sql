-- Appends records the caller chained to the heads items/park_batch.sql
-- read under their chains' locks (migration 0016), in order. $1..$11 one
-- entry per record: id, item, at, actor, kind, old_state, new_state,
-- trigger, metadata (JSON text; NULL for none), prev_hash, hash (hex,
-- stored as their bytes: migration 0015). The sequence numbers are drawn
-- in that order, so a chain's records are in seq order, the order
-- verification walks.
INSERT INTO audit_records (id, work_item_id, at, actor, kind, old_state, new_state,
                           trigger, metadata, prev_hash, hash)
SELECT r.id, r.item, r.at, r.actor, r.kind, r.old_state::json, r.new_state::json,
       r.trigger::json, r.metadata::json, decode(r.prev_hash, 'hex'), decode(r.hash, 'hex')
FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[], $4::text[], $5::text[], $6::text[],
            $7::text[], $8::text[], $9::text[], $10::text[], $11::text[])
     WITH ORDINALITY AS r (id, item, at, actor, kind, old_state, new_state, trigger, metadata,
                           prev_hash, hash, ord)
ORDER BY r.ord
