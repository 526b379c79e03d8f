-- Each pruned chain's last hash, for verification.
SELECT work_item_id, hash FROM audit_pruned
