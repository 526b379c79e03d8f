-- The seq of the newest record (0 when there is none).
SELECT COALESCE(MAX(seq), 0) AS seq FROM audit_records
