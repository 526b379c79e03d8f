-- Tests and benchmarks only: many active items in one statement.
-- $1 ids, $2 item_type, $3 actionable, $4 now.
INSERT INTO work_items (id, item_type, phase, actionable, attempts, created_at, updated_at)
SELECT seeded.id, $2, 'active', $3, 0, $4, $4
FROM UNNEST($1::uuid[]) AS seeded (id)
