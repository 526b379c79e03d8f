-- An item type ends a running item from inside its executor's transaction
-- (e.g. together with the item that takes over its work): active → ?3, only
-- under the caller's lease: the claim ?5 (its lease epoch), not expired at
-- ?2 (now, µs). `actionable` is left to the park step. ?1 id, ?4 error.
UPDATE work_items
SET phase = ?3,
    error = ?4,
    updated_at = ?2
WHERE id = ?1
  AND phase = 'active'
  AND leased_until IS NOT NULL
  AND leased_until > ?2
  AND lease_epoch = ?5
RETURNING id
