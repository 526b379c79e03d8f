-- Before archived records older than ?1 leave: each chain's last such
-- record becomes its pruned head (where verification picks it up).
INSERT INTO audit_pruned (work_item_id, seq, hash)
SELECT r.work_item_id, r.seq, r.hash
FROM audit_records r
WHERE r.at < ?1
  AND r.seq <= (SELECT seq FROM audit_archived)
  AND r.seq = (SELECT max(seq) FROM audit_records x
               WHERE x.work_item_id = r.work_item_id
                 AND x.at < ?1
                 AND x.seq <= (SELECT seq FROM audit_archived))
ON CONFLICT (work_item_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash
WHERE audit_pruned.seq < excluded.seq
