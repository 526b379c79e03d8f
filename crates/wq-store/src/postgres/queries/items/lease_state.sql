-- The fields event application needs, only while the caller holds the lease.
-- $1 id, $2 the holder's leased_until. FOR UPDATE: a concurrent claim waits
-- for this transaction instead of reclaiming the item halfway through it.
SELECT phase, error, last_event_at
FROM work_items
WHERE id = $1
  AND leased_until = $2  -- still our lease
FOR UPDATE
