-- Tells every engine listening on channel wq_work that the items $1 (ids
-- as text) were made due, after the transactions that did it committed
-- (PgStore::write; hints/work.sql has the payload). A statement of its own:
-- it writes nothing, so its commit waits for no flush.
SELECT pg_notify('wq_work', coalesce(current_setting('wq.origin', true), '') || ' ' || id)
FROM unnest($1::text[]) AS id
