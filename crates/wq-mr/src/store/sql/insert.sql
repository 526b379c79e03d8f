INSERT INTO mr_details (
    work_item_id, forge, project, source_branch, target_branch, generation, title, description,
    commit_message, labels, file_actions, auto_merge, ci_retry, content_hash, metadata_hash,
    created_at, updated_at
) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16)
