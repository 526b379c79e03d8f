-- PostgreSQL's migration 1007 writes an unchanged submission's history row
-- and audit record in one call of a function; SQLite does the same with
-- one query of both statements (wq_store::sqlite::execute_then_append_audit)
-- and needs no schema change. This migration keeps both backends'
-- migration lists alike.
SELECT 1;
