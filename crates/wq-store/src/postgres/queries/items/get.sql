-- One work item by id ($1).
SELECT id, item_type, phase, actionable, attempts, error, leased_until,
       idempotency_key, caller_identity, created_at, updated_at, last_event_at
FROM work_items
WHERE id = $1
