-- Gives a held lease up; the item is claimable again at ?3 (NULL: at once).
-- actionable is left as it is. ?1 id, ?2 the holder's leased_until (µs).
UPDATE work_items
SET leased_until = ?3
WHERE id = ?1
  AND leased_until = ?2  -- still our lease
