-- PostgreSQL's migration 0015 stores the audit trail's hashes as bytes.
-- SQLite's stay text here. This migration keeps both backends' migration
-- lists alike.
SELECT 1;
