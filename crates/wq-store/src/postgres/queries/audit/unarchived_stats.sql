-- How many records are not archived yet, and the time of the oldest.
SELECT count(*) AS count, min(at) AS oldest
FROM audit_records
WHERE seq > (SELECT seq FROM audit_archived)
