-- Tests and benchmarks only: the ids of every item of a type, oldest first.
-- ?1 item_type.
SELECT id FROM work_items WHERE item_type = ?1 ORDER BY id
