-- PostgreSQL's migration 1007 writes an unchanged submission's history row
-- and audit record in one call; SQLite's statements run in process, with
-- no round trip to save. This migration keeps both backends' migration
-- lists alike.
SELECT 1;
