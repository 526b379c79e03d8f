-- The live (active or failed) item for a branch, for the upsert (DDR-40).
-- PostgreSQL's upsert appends FOR UPDATE OF w for its second, locked read.
SELECT d.work_item_id, w.phase, d.content_hash, d.metadata_hash, d.target_branch,
       w.caller_identity, d.generation
FROM mr_details d
JOIN work_items w ON w.id = d.work_item_id
WHERE d.forge = $1 AND lower(d.project) = lower($2) AND d.source_branch = $3
  AND w.phase IN ('active', 'failed')
ORDER BY d.generation DESC
LIMIT 1
