-- PostgreSQL's migration 0013 gives audit_heads room for heap-only
-- updates; SQLite has no fillfactor. This migration keeps both backends'
-- migration lists alike.
SELECT 1;
