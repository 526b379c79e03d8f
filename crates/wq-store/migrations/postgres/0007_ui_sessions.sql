-- Sign-in sessions of the web dashboard, and its one-time sign-in links.
-- Only the SHA-256 (hex) of a session id is kept; `principal` is who signed
-- in, matched against the rules again on every request. `kind` is
-- `session` or `link` (a single-use link, exchanged for a session).
CREATE TABLE ui_sessions (
    id_hash    text        PRIMARY KEY,
    kind       text        NOT NULL,
    principal  jsonb       NOT NULL,
    csrf_token text        NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX ui_sessions_expires ON ui_sessions (expires_at);
