-- The chain heads of the items ?1 (a JSON array of ids), as one JSON
-- object {item id: hash} (one row, not one per item): for each item with
-- records, the hash of its last one; else of the last record pruned from
-- its chain (audit_pruned). Items with neither start a new chain (''). The
-- single writer keeps them current.
SELECT json_group_object(heads.work_item_id, heads.hash) AS heads
FROM (
    SELECT r.work_item_id, r.hash
    FROM audit_records AS r
    WHERE r.seq IN (SELECT max(seq) FROM audit_records
                    WHERE work_item_id IN (SELECT value FROM json_each(?1))
                    GROUP BY work_item_id)
    UNION ALL
    SELECT p.work_item_id, p.hash
    FROM audit_pruned AS p
    WHERE p.work_item_id IN (SELECT value FROM json_each(?1))
      AND NOT EXISTS (SELECT 1 FROM audit_records AS r WHERE r.work_item_id = p.work_item_id)
) AS heads
