-- PostgreSQL's migration 0016 reads each chain's head from its last record
-- and orders a chain's writers with a lock of its own, as SQLite's single
-- writer always did. This migration keeps both backends' migration lists
-- alike.
SELECT 1;
