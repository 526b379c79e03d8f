-- The item that takes over a branch line whose change request merged while
-- newer content waited: the latest submitted desired state of item $1 as a
-- new generation ($3) of item $2.
INSERT INTO mr_details (
    work_item_id, forge, project, source_branch, target_branch, generation, title, description,
    commit_message, labels, file_actions, auto_merge, ci_retry, content_hash, metadata_hash,
    created_at, updated_at
)
SELECT $2, forge, project, source_branch, target_branch, $3, title, description, commit_message,
       labels, file_actions, auto_merge, ci_retry, content_hash, metadata_hash, $4, $4
FROM mr_details
WHERE work_item_id = $1
