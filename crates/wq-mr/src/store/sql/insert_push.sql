-- ensure_mr: a head workqueue pushed to the item's branch (ownership of the
-- branch for every generation of its line).
INSERT INTO mr_pushes (forge, project, source_branch, head_sha, work_item_id, pushed_at)
SELECT forge, project, source_branch, $2, work_item_id, $3
FROM mr_details
WHERE work_item_id = $1
ON CONFLICT DO NOTHING
