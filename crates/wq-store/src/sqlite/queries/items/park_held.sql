-- Which parks of a batch still hold their lease, and whether each has
-- events pending, as one JSON object {id: events pending (0/1)} (one row,
-- not one per park). ?1: a JSON array of {id, lease (µs)}. Read in the
-- writer's transaction just before items/park_many.sql, which writes the
-- same items: no event can commit in between (DDR-34).
SELECT json_group_object(
           w.id,
           EXISTS (SELECT 1 FROM pending_events AS e WHERE e.work_item_id = w.id)
       ) AS held
FROM json_each(?1) AS p
CROSS JOIN work_items AS w
WHERE w.id = p.value ->> 'id'
  AND w.leased_until = p.value ->> 'lease'  -- still our lease
