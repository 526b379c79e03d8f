-- The submission history: every accepted submission and its submitter.
INSERT INTO mr_submissions (
    work_item_id, generation, content_hash, outcome, caller_identity, submitted_at
) VALUES ($1, $2, $3, $4, $5, $6)
