-- PostgreSQL's migration 0014 gives the archiver's read a plan that stops
-- after its batch; SQLite's read follows its archive cursor by rowid
-- already. This migration keeps both backends' migration lists alike.
SELECT 1;
