-- PostgreSQL's wq_park_batch reads the parked items' chain heads with a
-- join from their ids (its migration 0012). SQLite's park has no such
-- function; this migration keeps both backends' migration lists alike.
SELECT 1;
