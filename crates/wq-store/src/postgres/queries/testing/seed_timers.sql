-- Tests and benchmarks only: a deferred `periodic_check` row per item, as an
-- item parked until its next periodic check has. $1 ids, $2 pending_until, $3 now.
INSERT INTO work_item_statuses
    (work_item_id, dimension, variant, status, detail, pending_until, updated_at)
SELECT seeded.id, 'periodic_check', '', 'true', '{}'::jsonb, $2, $3
FROM UNNEST($1::uuid[]) AS seeded (id)
