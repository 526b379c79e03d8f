-- An unchanged submission's history row and audit record in one call
-- (migration 1007): $1-$5 the row (item, generation, content hash, caller,
-- time), $6-$16 the record as wq_audit_append_record takes it.
SELECT o_seq, o_prev_hash, o_hash
FROM mr_record_unchanged($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
