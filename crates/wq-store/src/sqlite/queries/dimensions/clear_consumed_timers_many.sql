-- clear_consumed_timers.sql for many parked items at once. ?1: a JSON
-- array of {id, now (µs)}.
UPDATE work_item_statuses
SET pending_until = NULL
FROM (SELECT value ->> 'id' AS id, value ->> 'now' AS now FROM json_each(?1)) AS p
WHERE work_item_statuses.work_item_id = p.id
  AND work_item_statuses.pending_until IS NOT NULL
  AND (
      work_item_statuses.pending_until <= p.now  -- expired
      OR NOT EXISTS (                            -- or the item is finished
          SELECT 1 FROM work_items WHERE id = p.id AND phase = 'active'
      )
  )
