-- ensure_mr: the change request and the head it pushed; `mr_created` ($7)
-- when workqueue opened it (kept for the same number once set); the target
-- the head was built on ($8) and the labels workqueue applied ($9).
UPDATE mr_details
SET mr_created = CASE WHEN mr_number = $2 THEN (mr_created OR $7) ELSE $7 END,
    mr_number = $2, mr_url = $3, head_sha = $4, pushed_content_hash = $5, updated_at = $6,
    pushed_target_branch = $8, applied_labels = $9
WHERE work_item_id = $1
