-- The hash of the item's last record ('' for a new chain; the single writer
-- keeps it current). ?1 item id.
SELECT coalesce((SELECT hash FROM audit_records WHERE work_item_id = ?1
                 ORDER BY seq DESC LIMIT 1), '') AS hash
