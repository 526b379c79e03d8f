-- The live (active or failed) item for a branch, for the upsert (DDR-40).
-- PostgreSQL's upsert appends FOR UPDATE OF w for its second, locked read.
-- CROSS JOIN: SQLite keeps the tables in the order written, so it finds the
-- branch's few detail rows through their index and then their items;
-- without statistics it would otherwise walk every active item by phase.
-- PostgreSQL plans it as any inner join.
SELECT d.work_item_id, w.phase, d.content_hash, d.metadata_hash, d.target_branch,
       w.caller_identity, d.generation
FROM mr_details d
CROSS JOIN work_items w
WHERE w.id = d.work_item_id
  AND d.forge = $1 AND lower(d.project) = lower($2) AND d.source_branch = $3
  AND w.phase IN ('active', 'failed')
ORDER BY d.generation DESC
LIMIT 1
