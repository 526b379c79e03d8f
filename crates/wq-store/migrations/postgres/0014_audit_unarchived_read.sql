-- The archiver's read of the oldest records not archived yet, planned with
-- sorting off so that its only plan is the ordered scan of the partial
-- index, which stops after `n` rows. With statistics that put the
-- unarchived records at a small share of the table (taken when it was
-- empty, or when little was waiting), the planner preferred a bitmap scan
-- of every unarchived record and a sort: each batch of a backlog read all
-- of it (100,000 records: 4,263 pages and 90 ms a batch of 1,000, against
-- 32 pages and 0.4 ms in index order). A SQL function with a SET clause is
-- planned with that setting, and only it.
CREATE FUNCTION wq_audit_unarchived(n bigint) RETURNS SETOF audit_records
LANGUAGE sql STABLE
SET enable_sort = off
AS $$
    SELECT * FROM audit_records WHERE archived_at IS NULL ORDER BY seq LIMIT n
$$;
