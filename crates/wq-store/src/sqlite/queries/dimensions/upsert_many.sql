-- Upserts many dimension rows (the outcomes of a batch of parks), at most
-- one per (item, dimension, variant): status, detail and pending_until
-- replaced. ?1: a JSON array of {item, dimension, variant, status,
-- detail (JSON text), pending_until (µs or null), now (µs)}.
INSERT INTO work_item_statuses (
    work_item_id, dimension, variant, status, detail, pending_until, updated_at
)
SELECT value ->> 'item', value ->> 'dimension', value ->> 'variant', value ->> 'status',
       value ->> 'detail', value ->> 'pending_until', value ->> 'now'
FROM json_each(?1)
WHERE true  -- an upsert's SELECT needs a WHERE (SQLite's parsing rule)
ON CONFLICT (work_item_id, dimension, variant) DO UPDATE
SET status = excluded.status,
    detail = excluded.detail,
    pending_until = excluded.pending_until,  -- replaced, NULL clears it
    updated_at = excluded.updated_at
