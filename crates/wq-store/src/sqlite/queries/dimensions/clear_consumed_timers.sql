-- Clears consumed timers when the loop parks an item, so the sweep's
-- expired range (work_item_statuses_pending_until) stays small: expired
-- timers (this run acted on them), and every timer of an item that is no
-- longer active (the sweep only wakes active items for timers, so they would
-- expire into the range and stay there for good). ?1 item id, ?2 now (µs).
UPDATE work_item_statuses
SET pending_until = NULL
WHERE work_item_id = ?1
  AND pending_until IS NOT NULL
  AND (
      pending_until <= ?2                      -- expired
      OR NOT EXISTS (                          -- or the item is finished
          SELECT 1 FROM work_items WHERE id = ?1 AND phase = 'active'
      )
  )
