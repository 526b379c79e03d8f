-- A new desired state for a live item (DDR-40).
UPDATE mr_details
SET target_branch = $2, title = $3, description = $4, commit_message = $5, labels = $6,
    file_actions = $7, auto_merge = $8, ci_retry = $9, content_hash = $10, metadata_hash = $11,
    updated_at = $12
WHERE work_item_id = $1
