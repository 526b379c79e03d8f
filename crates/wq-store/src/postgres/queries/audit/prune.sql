-- Archived records older than $1 leave the database (never an unarchived
-- one).
DELETE FROM audit_records
WHERE at < $1
  AND seq <= (SELECT seq FROM audit_archived)
