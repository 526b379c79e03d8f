-- PostgreSQL adds wq_audit_append, wq_park_audited and wq_park_many here, to
-- append audit records and park (many items at once) in one round trip.
-- SQLite runs the same steps as in-process statements in the store's
-- transaction, so it needs no schema change; this migration keeps both
-- backends' migration lists alike.
SELECT 1;
