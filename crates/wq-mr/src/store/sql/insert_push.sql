-- ensure_mr: a head workqueue pushed to the item's branch (ownership of the
-- branch for every generation of its line), with the content hash ($4) and
-- the target branch ($5) it carries.
INSERT INTO mr_pushes (forge, project, source_branch, head_sha, work_item_id, pushed_at,
                       content_hash, target_branch)
SELECT forge, project, source_branch, $2, work_item_id, $3, $4, $5
FROM mr_details
WHERE work_item_id = $1
ON CONFLICT DO NOTHING
