-- Gives up the leadership taken by leader/try_lock.sql. $1 the task's name.
SELECT pg_advisory_unlock(22353, hashtext($1))
