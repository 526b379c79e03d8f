-- The trail's barrier (migration 0015), shared, before a batch's records
-- draw their sequence numbers: the archiver's horizon waits for this
-- transaction to end. After the batch's other locks, before its chain
-- heads'.
SELECT pg_advisory_xact_lock_shared(2003919221, 0)
