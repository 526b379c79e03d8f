-- Which parks of a batch still hold their lease and whether each has
-- events pending, as one JSON object {id: events pending (0/1)}, and the
-- chain heads of those that will append audit records, as another {id:
-- head} (one row, not one per park). ?1: a JSON array of {id, lease (µs),
-- head (0/1)}. Read in the writer's transaction just before
-- items/park_many.sql, which writes the same items: no event can commit in
-- between (DDR-34), and the single writer keeps the heads current until
-- the park appends its records.
--
-- A chain's head is the hash of its item's last record; else of the last
-- record pruned from its chain (audit_pruned); else '' (a new chain).
SELECT json_group_object(
           w.id,
           EXISTS (SELECT 1 FROM pending_events AS e WHERE e.work_item_id = w.id)
       ) AS held,
       json_group_object(
           w.id,
           coalesce(
               (SELECT r.hash FROM audit_records AS r
                WHERE r.work_item_id = w.id
                ORDER BY r.seq DESC
                LIMIT 1),
               (SELECT pr.hash FROM audit_pruned AS pr WHERE pr.work_item_id = w.id),
               '')
       ) FILTER (WHERE p.value ->> 'head') AS heads
FROM json_each(?1) AS p
CROSS JOIN work_items AS w
WHERE w.id = p.value ->> 'id'
  AND w.leased_until = p.value ->> 'lease'  -- still our lease
