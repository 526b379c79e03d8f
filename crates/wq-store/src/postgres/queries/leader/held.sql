-- Whether this session still holds the leadership of the task $1.
SELECT EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory'
      AND pid = pg_backend_pid()
      AND classid = 22353
      AND objid = hashtext($1)::oid
      AND objsubid = 2
      AND granted
)
