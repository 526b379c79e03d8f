-- Deletes the session or link of kind $2 with id hash $1
-- and returns it (the caller checks its expiry): a link is taken once.
DELETE FROM ui_sessions
WHERE id_hash = $1 AND kind = $2
RETURNING id_hash, kind, principal, csrf_token, created_at, expires_at
