-- upsert_many.sql for updates without a detail: a new row gets '{}', an
-- existing one keeps its detail. ?1: a JSON array of {item, dimension,
-- variant, status, pending_until (µs or null), now (µs)}.
INSERT INTO work_item_statuses (
    work_item_id, dimension, variant, status, detail, pending_until, updated_at
)
SELECT value ->> 'item', value ->> 'dimension', value ->> 'variant', value ->> 'status',
       '{}', value ->> 'pending_until', value ->> 'now'
FROM json_each(?1)
WHERE true  -- an upsert's SELECT needs a WHERE (SQLite's parsing rule)
ON CONFLICT (work_item_id, dimension, variant) DO UPDATE
SET status = excluded.status,
    pending_until = excluded.pending_until,  -- replaced, NULL clears it
    updated_at = excluded.updated_at
