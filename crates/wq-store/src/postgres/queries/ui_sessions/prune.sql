-- Deletes what expired by $1.
DELETE FROM ui_sessions WHERE expires_at <= $1
