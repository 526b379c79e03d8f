-- Before archived records older than $1 leave: each chain's last such
-- record becomes its pruned head (where verification picks it up).
INSERT INTO audit_pruned (work_item_id, seq, hash)
SELECT DISTINCT ON (work_item_id) work_item_id, seq, hash
FROM audit_records
WHERE at < $1
  AND seq <= (SELECT seq FROM audit_archived)
ORDER BY work_item_id, seq DESC
ON CONFLICT (work_item_id) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash
WHERE audit_pruned.seq < EXCLUDED.seq
