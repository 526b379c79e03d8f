-- Archived records older than $1 leave the database (never an unarchived
-- one).
DELETE FROM audit_records WHERE archived_at IS NOT NULL AND at < $1
