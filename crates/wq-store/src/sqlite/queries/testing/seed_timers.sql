-- Tests and benchmarks only: a deferred `needs_reconcile` row per item, as a
-- parked merge request has. ?1 JSON array of ids, ?2 pending_until, ?3 now.
INSERT INTO work_item_statuses
    (work_item_id, dimension, variant, status, detail, pending_until, updated_at)
SELECT seeded.value, 'needs_reconcile', '', 'true', '{}', ?2, ?3
FROM json_each(?1) AS seeded
