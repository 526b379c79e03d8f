-- Wakes an item after a change outside the loop (e.g. a content update).
-- ?1 id, ?2 now (µs).
UPDATE work_items
SET actionable = 1,
    updated_at = ?2
WHERE id = ?1
