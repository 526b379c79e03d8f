-- The phase of one item (?1), to explain why a conditional update did nothing.
SELECT phase
FROM work_items
WHERE id = ?1
