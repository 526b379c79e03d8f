-- The loop's exit with an outcome and its audit records, in one statement
-- that commits alone: see wq_park_audited in migration 0008. $1..$8 as in
-- park_with.sql, $9 the records as a JSON array (as audit/append.sql).
SELECT wq_park_audited($1, $2, $3, $4, $5, $6, $7, $8, $9)
