-- Stores a raw event (DDR-30). $1 item id, $2 event type, $3 body, $4 now,
-- $5 delivery id, $6 raw body (bounded).
INSERT INTO pending_events (work_item_id, event_type, body, received_at, delivery_id, raw)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id
