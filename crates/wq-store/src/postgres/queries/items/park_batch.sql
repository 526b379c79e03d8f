-- The loop's exits of a batch of parks, one statement per step: see
-- wq_park_batch in migrations 0009, 0012, 0016 and 0019. Run in a transaction, then
-- append the outcomes' records (audit/append_chained.sql) and commit.
SELECT id, parked, head
FROM wq_park_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
