-- A page of work items, newest first (ids are UUIDv7 text, which sorts by
-- creation time). Each filter is skipped when its parameter is NULL.
SELECT id, item_type, phase, actionable, attempts, error, leased_until,
       idempotency_key, caller_identity, created_at, updated_at, last_event_at
FROM work_items
WHERE (?1 IS NULL OR phase = ?1)      -- phase filter
  AND (?2 IS NULL OR item_type = ?2)  -- item type filter
  AND (?3 IS NULL OR id < ?3)         -- keyset: strictly older than the previous page's last id
ORDER BY id DESC
LIMIT ?4
