-- Webhook resolution by the recorded head commit: active items only.
SELECT d.work_item_id
FROM mr_details d
JOIN work_items w ON w.id = d.work_item_id
WHERE d.forge = $1 AND lower(d.project) = lower($2) AND d.head_sha = $3 AND w.phase = 'active'
ORDER BY d.generation DESC
LIMIT 1
