-- post_dashboard_note: a status note is about to be posted on change
-- request $2; a later run looks for it before posting another.
UPDATE mr_details SET note_intent_number = $2, updated_at = $3 WHERE work_item_id = $1
