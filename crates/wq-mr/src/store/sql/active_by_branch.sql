-- Webhook resolution by source branch: active items only.
-- CROSS JOIN: SQLite keeps the tables in the order written, so it finds the
-- branch's few detail rows through their index and then their items;
-- without statistics it would otherwise walk every active item by phase.
-- PostgreSQL plans it as any inner join.
SELECT d.work_item_id
FROM mr_details d
CROSS JOIN work_items w
WHERE w.id = d.work_item_id
  AND d.forge = $1 AND lower(d.project) = lower($2) AND d.source_branch = $3 AND w.phase = 'active'
ORDER BY d.generation DESC
LIMIT 1
