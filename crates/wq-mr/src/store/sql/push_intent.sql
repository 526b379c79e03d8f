-- ensure_mr: a push is about to leave; cleared by record_push. Only under
-- the caller's run's lease, $3 its lease epoch, unexpired at $2: a run
-- paused past its lease, or whose item another run claimed since, pushes
-- nothing over what that run may have pushed. $1 id, $2 now.
UPDATE mr_details SET push_intent_at = $2, updated_at = $2
WHERE work_item_id = $1
  AND EXISTS (SELECT 1 FROM work_items AS w
              WHERE w.id = $1
                AND w.lease_epoch = $3      -- this run's claim
                AND w.leased_until > $2)    -- not expired
RETURNING work_item_id
