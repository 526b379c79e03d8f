SELECT work_item_id, forge, project, source_branch, target_branch, generation, title,
       description, commit_message, labels, file_actions, auto_merge, ci_retry, content_hash,
       metadata_hash, mr_number, mr_url, head_sha, head_pipeline_id, pushed_content_hash,
       merge_queue_state, merge_queue_position, merge_queue_eta_seconds, last_merge_signature,
       last_merge_attempt_at, last_queue_attempt_head_sha, last_merge_result, last_error_kind,
       last_error, merge_retry_authorized, mr_created, push_intent_at, merge_transient_count,
       merge_retry_at, applied_labels, pushed_target_branch, note_intent_number, created_at,
       updated_at
FROM mr_details
WHERE work_item_id = $1
