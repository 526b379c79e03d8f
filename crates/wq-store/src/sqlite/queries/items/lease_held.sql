-- Whether the run that claimed item ?1 under lease epoch ?3 still holds
-- it at ?2 (now, µs): its claim, and its lease not expired.
SELECT 1
FROM work_items
WHERE id = ?1
  AND lease_epoch = ?3
  AND leased_until > ?2
