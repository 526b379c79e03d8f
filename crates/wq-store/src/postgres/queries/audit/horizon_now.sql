-- The trail's horizon without waiting: the highest number the sequence
-- gave, if no append is in progress now (the trail's barrier, which every
-- append holds shared from before it draws its numbers until its
-- transaction ends, is free to take alone), else NULL. Every number at or
-- below it was drawn by a transaction that has ended. The lock lasts as
-- long as this statement's transaction: run it alone.
SELECT CASE
           WHEN pg_try_advisory_xact_lock(2003919221, 0)  -- the barrier ('wqau', 0)
           THEN (SELECT CASE WHEN is_called THEN last_value ELSE 0 END
                 FROM audit_records_seq_seq)
       END AS horizon
