-- Webhook resolution: active items only (DDR-32).
SELECT d.work_item_id
FROM mr_details d
JOIN work_items w ON w.id = d.work_item_id
WHERE d.forge = $1 AND lower(d.project) = lower($2) AND d.mr_number = $3 AND w.phase = 'active'
ORDER BY d.generation DESC
LIMIT 1
