-- PostgreSQL adds wq_park_batch here, to park many items with one
-- statement per step. SQLite runs the same steps as statements in the
-- writer's transaction (sqlite::park), so it needs no schema change; this
-- migration keeps both backends' migration lists alike.
SELECT 1;
