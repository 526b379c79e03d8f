-- Tells every engine listening on channel wq_work that item $1 was made
-- due, when (and only if) this transaction commits: a hint, so that a
-- replica other than the one that made the change takes it at once
-- instead of at its next sweep. The payload is the sending store's origin
-- (hints/origin.sql; '' when unknown) and the item id.
SELECT pg_notify('wq_work', coalesce(current_setting('wq.origin', true), '') || ' ' || $1::text)
