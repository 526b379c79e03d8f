-- Each pruned chain's last hash, for verification.
SELECT work_item_id, encode(hash, 'hex') AS hash FROM audit_pruned
