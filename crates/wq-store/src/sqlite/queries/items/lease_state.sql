-- The fields event application needs, only while the caller holds the lease.
-- ?1 id, ?2 the holder's leased_until (µs). Runs inside BEGIN IMMEDIATE, so
-- nobody else writes the row until the transaction ends.
SELECT phase, error, last_event_at
FROM work_items
WHERE id = ?1
  AND leased_until = ?2  -- still our lease
