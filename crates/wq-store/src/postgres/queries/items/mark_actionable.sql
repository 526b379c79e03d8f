-- Wakes an item after a change outside the loop (e.g. a content update).
-- $1 id, $2 now.
UPDATE work_items
SET actionable = true,
    updated_at = $2
WHERE id = $1
