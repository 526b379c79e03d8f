-- ensure_mr: the change request and the head it pushed.
UPDATE mr_details
SET mr_number = $2, mr_url = $3, head_sha = $4, pushed_content_hash = $5, updated_at = $6
WHERE work_item_id = $1
