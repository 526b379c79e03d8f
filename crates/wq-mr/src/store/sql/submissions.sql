-- The submission history of an item, oldest first.
SELECT generation, content_hash, outcome, caller_identity, submitted_at
FROM mr_submissions
WHERE work_item_id = $1
ORDER BY submitted_at, generation
