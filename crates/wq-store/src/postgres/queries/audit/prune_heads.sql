-- Before archived records older than $1 leave: each chain's last such
-- record becomes its pruned head (where verification picks it up).
INSERT INTO audit_pruned (work_item_id, seq, hash)
SELECT DISTINCT ON (work_item_id) work_item_id, seq, hash
FROM audit_records
WHERE archived_at IS NOT NULL AND at < $1
ORDER BY work_item_id, seq DESC
ON CONFLICT (work_item_id) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash
WHERE audit_pruned.seq < EXCLUDED.seq
