-- Sign-in sessions of the web dashboard, and its one-time sign-in links.
-- Only the SHA-256 (hex) of a session id is kept; `principal` is who signed
-- in (JSON), matched against the rules again on every request. `kind` is
-- `session` or `link` (a single-use link, exchanged for a session). Times
-- in µs since the epoch.
CREATE TABLE ui_sessions (
    id_hash    TEXT    PRIMARY KEY,
    kind       TEXT    NOT NULL,
    principal  TEXT    NOT NULL,
    csrf_token TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX ui_sessions_expires ON ui_sessions (expires_at);
