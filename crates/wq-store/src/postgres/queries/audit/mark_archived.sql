-- Marks shipped records archived: the archive's cursor moves over the
-- oldest unarchived records that are in $1 (their seqs, a JSON array), up
-- to the first one that is not (the archiver reads them in order below a
-- horizon that no append in progress is under, so the cursor covers
-- exactly the shipped prefix). $2 now.
UPDATE audit_archived
SET seq = coalesce((SELECT min(r.seq) - 1
                    FROM audit_records AS r
                    WHERE r.seq > audit_archived.seq
                      AND r.seq <= (SELECT max(value::bigint)
                                    FROM jsonb_array_elements_text($1))
                      AND r.seq NOT IN (SELECT value::bigint
                                        FROM jsonb_array_elements_text($1))),
                   (SELECT max(value::bigint) FROM jsonb_array_elements_text($1))),
    archived_at = $2
WHERE seq < (SELECT max(value::bigint) FROM jsonb_array_elements_text($1))
