-- DDR-39: the generation a new item for this branch gets.
SELECT COALESCE(MAX(generation), 0) + 1
FROM mr_details
WHERE forge = $1 AND lower(project) = lower($2) AND source_branch = $3
