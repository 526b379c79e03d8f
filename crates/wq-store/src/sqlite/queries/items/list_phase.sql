-- items/list.sql for one phase (a phase given): the same page, with a
-- plain equality so the planner walks the (phase, id) index instead of
-- filtering the whole table newest first.
-- A page of work items with their place, newest first (ids are UUIDv7 text,
-- which sorts by creation time). Each filter is skipped when its parameter
-- is NULL.
-- ?5 visibility: NULL (everything) or a JSON array of grants, each
-- {"t": [...], "f": [...], "p": [...]} of LIKE patterns (backslash escapes)
-- for item type, forge and project, a missing or null list allowing all. A
-- row is kept when some grant allows it; a row without a place passes the
-- forge and project lists (the caller decides those exactly).
SELECT id, item_type, phase, actionable, attempts, error, leased_until,
       idempotency_key, caller_identity, created_at, updated_at, last_event_at,
       forge, project
FROM work_items
WHERE phase = ?1                      -- the phase: read by (phase, id)
  AND (?2 IS NULL OR item_type = ?2)  -- item type filter
  AND (?3 IS NULL OR id < ?3)         -- keyset: strictly older than the previous page's last id
  AND (?5 IS NULL OR EXISTS (
        SELECT 1 FROM json_each(?5) AS grant_
        WHERE (json_type(grant_.value, '$.t') IS NOT 'array' OR EXISTS (
                  SELECT 1 FROM json_each(grant_.value, '$.t') AS p
                  WHERE work_items.item_type LIKE p.value ESCAPE '\'))
          AND (json_type(grant_.value, '$.f') IS NOT 'array' OR work_items.forge IS NULL OR EXISTS (
                  SELECT 1 FROM json_each(grant_.value, '$.f') AS p
                  WHERE work_items.forge LIKE p.value ESCAPE '\'))
          AND (json_type(grant_.value, '$.p') IS NOT 'array' OR work_items.project IS NULL OR EXISTS (
                  SELECT 1 FROM json_each(grant_.value, '$.p') AS p
                  WHERE work_items.project LIKE p.value ESCAPE '\'))
      ))
ORDER BY id DESC
LIMIT ?4
