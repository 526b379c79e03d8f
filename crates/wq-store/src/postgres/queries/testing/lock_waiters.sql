-- Sessions of this database waiting for a lock, of the kind $1 when given
-- (pg_stat_activity.wait_event, e.g. 'advisory').
SELECT count(*)
FROM pg_stat_activity
WHERE datname = current_database()
  AND wait_event_type = 'Lock'
  AND ($1::text IS NULL OR wait_event = $1)
