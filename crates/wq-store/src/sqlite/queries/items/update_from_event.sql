-- Writes the outcome of one applied event: phase and error (unchanged when
-- the phase part was absent or stale), the last_event_at ordering guard and
-- updated_at. ?1 id, ?2 phase, ?3 error, ?4 last_event_at (µs), ?5 now (µs).
UPDATE work_items
SET phase = ?2,
    error = ?3,
    last_event_at = ?4,
    updated_at = ?5
WHERE id = ?1
