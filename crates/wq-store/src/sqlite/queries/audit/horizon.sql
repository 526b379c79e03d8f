-- How far the archiver may read: every number the sequence gave. Under
-- the single writer records are numbered in commit order, so every
-- visible record is below it.
SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'audit_records'), 0) AS horizon
