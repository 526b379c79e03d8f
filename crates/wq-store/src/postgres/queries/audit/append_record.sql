-- Appends one audit record chained to its item's head: see
-- wq_audit_append_record in migration 0018. $1 id, $2 item, $3 at, $4
-- actor, $5 kind, $6 old_state, $7 new_state, $8 trigger (JSON text or
-- NULL), $9 metadata (JSON text), $10 and $11 the record's canonical text
-- before and after its previous hash.
SELECT o_seq, o_prev_hash, o_hash
FROM wq_audit_append_record($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
