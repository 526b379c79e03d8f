-- reconcile_mr: what one read of the change request saw.
UPDATE mr_details
SET head_sha = $2, head_pipeline_id = $3, merge_queue_state = $4, merge_queue_position = $5,
    merge_queue_eta_seconds = $6, mr_url = COALESCE($7, mr_url), updated_at = $8
WHERE work_item_id = $1
