-- Upserts one dimension row. ?1 item id, ?2 dimension, ?3 variant, ?4 status
-- ('true'/'false'), ?5 detail JSON text or NULL, ?6 pending_until (µs) or
-- NULL, ?7 now (µs).
INSERT INTO work_item_statuses (
    work_item_id, dimension, variant, status, detail, pending_until, updated_at
)
VALUES (?1, ?2, ?3, ?4, coalesce(?5, '{}'), ?6, ?7)  -- a new row without detail gets '{}'
ON CONFLICT (work_item_id, dimension, variant) DO UPDATE
SET status = excluded.status,
    detail = coalesce(?5, work_item_statuses.detail),  -- NULL detail keeps the stored one
    pending_until = excluded.pending_until,            -- replaced, NULL clears it
    updated_at = excluded.updated_at
