-- SQLite's audit table loses its UNIQUE index on the record id and archives
-- with a cursor here (records get their seq in commit order under its
-- single writer). PostgreSQL's seqs are not in commit order, so its records
-- keep `archived_at` and the partial index; its id lost its UNIQUE index in
-- 0008. This migration keeps both backends' migration lists alike.
SELECT 1;
