-- Tests and benchmarks only: many active items in one statement.
-- ?1 JSON array of ids, ?2 item_type, ?3 actionable, ?4 now (microseconds).
INSERT INTO work_items (id, item_type, phase, actionable, attempts, created_at, updated_at)
SELECT seeded.value, ?2, 'active', ?3, 0, ?4, ?4
FROM json_each(?1) AS seeded
