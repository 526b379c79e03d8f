-- post_dashboard_note: a status note is about to be posted on change
-- request $2; a later run looks for it before posting another. Only under
-- the caller's run's lease, $4 its lease epoch, unexpired at $3: a run
-- paused past its lease, or whose item another run claimed since, posts no
-- second note beside the one that run may post. $1 id, $3 now.
UPDATE mr_details SET note_intent_number = $2, updated_at = $3
WHERE work_item_id = $1
  AND EXISTS (SELECT 1 FROM work_items AS w
              WHERE w.id = $1
                AND w.lease_epoch = $4      -- this run's claim
                AND w.leased_until > $3)    -- not expired
RETURNING work_item_id
