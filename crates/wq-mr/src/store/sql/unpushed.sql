-- Whether item $1's latest submitted state never reached the forge: content
-- or target branch other than the last push's.
SELECT COALESCE(pushed_content_hash, '') <> content_hash
    OR COALESCE(pushed_target_branch, target_branch) <> target_branch
FROM mr_details
WHERE work_item_id = $1
