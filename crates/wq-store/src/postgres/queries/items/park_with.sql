-- The loop's exit step in one round trip: see wq_park in migration 0002.
-- $1 id, $2 the holder's leased_until, $3 now, $4 advisory lock key,
-- $5 write an outcome?, $6 its phase or NULL, $7 its error, $8 its dimension
-- upserts as a JSON array.
SELECT wq_park($1, $2, $3, $4, $5, $6, $7, $8)
