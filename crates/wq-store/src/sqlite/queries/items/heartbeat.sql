-- Extends a held lease. ?1 id, ?2 the holder's leased_until (µs), ?3 the new
-- leased_until (µs).
UPDATE work_items
SET leased_until = ?3
WHERE id = ?1
  AND leased_until = ?2  -- still our lease
