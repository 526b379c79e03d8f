-- Tests and benchmarks only: a deferred `needs_reconcile` row per item, as a
-- parked merge request has. $1 ids, $2 pending_until, $3 now.
INSERT INTO work_item_statuses
    (work_item_id, dimension, variant, status, detail, pending_until, updated_at)
SELECT seeded.id, 'needs_reconcile', '', 'true', '{}'::jsonb, $2, $3
FROM UNNEST($1::uuid[]) AS seeded (id)
