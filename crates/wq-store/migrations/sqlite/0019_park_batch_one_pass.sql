-- PostgreSQL's migration 0019 rewrites its batch park function; SQLite
-- parks a batch from sqlite::park. This migration keeps both backends'
-- migration lists alike.
SELECT 1;
