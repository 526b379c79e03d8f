-- Items per (item_type, phase); served by work_items_type_phase_id.
SELECT item_type, phase, count(*) AS count
FROM work_items
GROUP BY item_type, phase
ORDER BY item_type, phase
