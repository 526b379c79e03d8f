-- PostgreSQL's migration 0018 appends a single audit record with its fields
-- as parameters; SQLite's appends always did. This migration keeps both
-- backends' migration lists alike.
SELECT 1;
