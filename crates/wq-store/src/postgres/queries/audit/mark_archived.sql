-- Marks the records of a shipped batch archived. $1 their seqs (JSON
-- array), $2 now.
UPDATE audit_records SET archived_at = $2
WHERE archived_at IS NULL
  AND seq IN (SELECT value::bigint FROM jsonb_array_elements_text($1))
