-- The `ping` test type's own table: one row per pong and per tick.
CREATE TABLE IF NOT EXISTS ping_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    work_item_id TEXT
);
