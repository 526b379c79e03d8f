-- The loop's exit (DDR-49): the only statement that writes actionable = 0,
-- run in the write transaction that just saw no pending events. Releases the
-- lease. ?1 id, ?2 the holder's leased_until (µs).
UPDATE work_items
SET actionable = 0,
    leased_until = NULL
WHERE id = ?1
  AND leased_until = ?2  -- still our lease
