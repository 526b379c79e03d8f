-- Leadership of a periodic task: a session-level advisory lock in the
-- two-key space (the items' locks use the one-bigint space, which does not
-- overlap), held by the connection until it closes or unlocks.
-- $1 the task's name.
SELECT pg_try_advisory_lock(22353, hashtext($1))
