-- ensure_mr: the head a commit of this content produced, recorded at once
-- so a failure later in the executor does not push the same content again;
-- the push intent is settled. $5: the target branch it was built on.
UPDATE mr_details
SET head_sha = $2, pushed_content_hash = $3, push_intent_at = NULL, updated_at = $4,
    pushed_target_branch = $5
WHERE work_item_id = $1
