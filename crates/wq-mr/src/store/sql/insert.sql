-- A new item's row. $1-$12 are bound as in update_spec.sql.
INSERT INTO mr_details (
    work_item_id, target_branch, title, description, commit_message, labels, file_actions,
    auto_merge, ci_retry, content_hash, metadata_hash, created_at, updated_at, forge, project,
    source_branch, generation
) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13, $14, $15, $16)
