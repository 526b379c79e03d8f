-- One pong (with its item) or tick (without).
INSERT INTO ping_log (kind, work_item_id) VALUES ($1, $2)
