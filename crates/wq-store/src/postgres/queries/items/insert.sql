-- A new work item: active, actionable (DDR-49), unleased, no failures.
-- $1 id, $2 item_type, $3 idempotency_key, $4 caller_identity, $5 now,
-- $6 forge, $7 project (NULL when the type has no place).
-- A live duplicate idempotency key violates work_items_idempotency_key_live.
INSERT INTO work_items (
    id, item_type, phase, actionable, attempts, error, leased_until,
    idempotency_key, caller_identity, created_at, updated_at, last_event_at,
    forge, project
)
VALUES ($1, $2, 'active', true, 0, NULL, NULL, $3, $4, $5, $5, NULL, $6, $7)
RETURNING id, item_type, phase, actionable, attempts, error, leased_until,
          idempotency_key, caller_identity, created_at, updated_at, last_event_at
