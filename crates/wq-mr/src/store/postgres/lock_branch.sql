-- DDR-40: one upsert per (forge, project, source_branch) at a time. The
-- lookup, the generation and the insert then see one state; without it a
-- concurrent first insert committing between the lookup and the generation
-- read would yield generation 2 beside a live generation 1. Two int4 keys:
-- a namespace for this lock and a hash of the branch identity (the one-key
-- form, used for per-item locks, does not conflict with this form).
SELECT pg_advisory_xact_lock($1, $2)
