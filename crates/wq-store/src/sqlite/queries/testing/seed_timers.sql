-- Tests and benchmarks only: a deferred `periodic_check` row per item, as an
-- item parked until its next periodic check has. ?1 JSON array of ids, ?2 pending_until, ?3 now.
INSERT INTO work_item_statuses
    (work_item_id, dimension, variant, status, detail, pending_until, updated_at)
SELECT seeded.value, 'periodic_check', '', 'true', '{}', ?2, ?3
FROM json_each(?1) AS seeded
