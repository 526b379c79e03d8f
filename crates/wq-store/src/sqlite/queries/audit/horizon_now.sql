-- The trail's horizon (as audit/horizon.sql: under the single writer
-- records are numbered in commit order, so nothing is ever waited for).
SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'audit_records'), 0) AS horizon
