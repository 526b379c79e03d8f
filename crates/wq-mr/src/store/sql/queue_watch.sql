-- The merge queue sync: active items on one forge whose merge attempt is in
-- flight or accepted, or that were last seen in a merge queue; one page of
-- at most $4 after the cursor ($2 project, $3 mr_number; '' and -1 for the
-- first).
SELECT d.work_item_id, d.project, d.mr_number, d.merge_queue_state,
       d.merge_queue_position, d.merge_queue_eta_seconds
FROM mr_details d
JOIN work_items w ON w.id = d.work_item_id
WHERE d.forge = $1 AND w.phase = 'active' AND d.mr_number IS NOT NULL
  AND (d.merge_queue_state <> '' OR d.last_merge_result IN ('in_flight', 'accepted'))
  AND (d.project, d.mr_number) > ($2, $3)
ORDER BY d.project, d.mr_number
LIMIT $4
