-- Marks the records of a shipped batch archived. ?1 their seqs (JSON
-- array text), ?2 now (µs).
UPDATE audit_records SET archived_at = ?2
WHERE archived_at IS NULL
  AND seq IN (SELECT value FROM json_each(?1))
