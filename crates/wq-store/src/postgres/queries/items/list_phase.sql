-- items/list.sql for one phase (a phase given): the same page, with a
-- plain equality so the planner walks the (phase, id) index instead of
-- filtering the whole table newest first.
-- A page of work items with their place, newest first (ids are UUIDv7,
-- which sort by creation time). Each filter is skipped when its parameter
-- is NULL.
-- $5 visibility: NULL (everything) or a JSON array of grants, each
-- {"t": [...], "f": [...], "p": [...]} of ILIKE patterns (backslash
-- escapes) for item type, forge and project, a missing or null list
-- allowing all. A row is kept when some grant allows it; a row without a
-- place passes the forge and project lists (the caller decides those
-- exactly).
SELECT id, item_type, phase, actionable, attempts, error, leased_until,
       idempotency_key, caller_identity, created_at, updated_at, last_event_at,
       forge, project
FROM work_items
WHERE phase = $1                            -- the phase: read by (phase, id)
  AND ($2::text IS NULL OR item_type = $2)  -- item type filter
  AND ($3::uuid IS NULL OR id < $3)         -- keyset: strictly older than the previous page's last id
  AND ($5::jsonb IS NULL OR EXISTS (
        SELECT 1 FROM jsonb_array_elements($5::jsonb) AS grant_(value)
        WHERE (jsonb_typeof(grant_.value -> 't') IS DISTINCT FROM 'array' OR EXISTS (
                  SELECT 1 FROM jsonb_array_elements_text(grant_.value -> 't') AS p(value)
                  WHERE work_items.item_type ILIKE p.value ESCAPE '\'))
          AND (jsonb_typeof(grant_.value -> 'f') IS DISTINCT FROM 'array' OR work_items.forge IS NULL OR EXISTS (
                  SELECT 1 FROM jsonb_array_elements_text(grant_.value -> 'f') AS p(value)
                  WHERE work_items.forge ILIKE p.value ESCAPE '\'))
          AND (jsonb_typeof(grant_.value -> 'p') IS DISTINCT FROM 'array' OR work_items.project IS NULL OR EXISTS (
                  SELECT 1 FROM jsonb_array_elements_text(grant_.value -> 'p') AS p(value)
                  WHERE work_items.project ILIKE p.value ESCAPE '\'))
      ))
ORDER BY id DESC
LIMIT $4
