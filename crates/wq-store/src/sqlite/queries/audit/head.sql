-- The hash of the item's last record, else of the last record pruned from
-- its chain (audit_pruned), else '' (a new chain); the single writer keeps
-- it current. ?1 item id.
SELECT coalesce((SELECT hash FROM audit_records WHERE work_item_id = ?1
                 ORDER BY seq DESC LIMIT 1),
                (SELECT hash FROM audit_pruned WHERE work_item_id = ?1),
                '') AS hash
