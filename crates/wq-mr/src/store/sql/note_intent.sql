-- post_dashboard_note: a status note is about to be posted on change
-- request $2; a later run looks for it before posting another. Made only
-- while the caller's run holds the item (wq_store's lease_held, in the same
-- transaction). $1 id, $3 now.
UPDATE mr_details SET note_intent_number = $2, updated_at = $3 WHERE work_item_id = $1
