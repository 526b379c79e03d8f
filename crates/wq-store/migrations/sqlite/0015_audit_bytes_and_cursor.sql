-- PostgreSQL's migration 0015 stores the audit trail's hashes as bytes and
-- archives with a cursor, as SQLite does since migration 0010; SQLite's
-- hashes stay text. This migration keeps both backends' migration lists
-- alike.
SELECT 1;
