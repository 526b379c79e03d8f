-- How far the archiver may read: every record numbered up to `horizon`
-- was committed or rolled back (wq_audit_horizon, migration 0015). NULL
-- while appends in progress did not end within the lock timeout. Run alone
-- in its transaction.
SELECT wq_audit_horizon() AS horizon
