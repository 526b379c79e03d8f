-- The delivery a pending event came from (DDR-33): the forge's delivery id
-- and the raw body as received, bounded (audit::MAX_RAW_BYTES), kept with
-- the event; its `event.received` audit record names the event and the
-- delivery id and keeps the same bounded body after the event is applied.
ALTER TABLE pending_events ADD COLUMN delivery_id TEXT;
ALTER TABLE pending_events ADD COLUMN raw TEXT;
