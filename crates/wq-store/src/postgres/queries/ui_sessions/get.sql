-- A session or link of kind $2 by its id hash $1, unless it expired by $3.
SELECT id_hash, kind, principal, csrf_token, created_at, expires_at
FROM ui_sessions
WHERE id_hash = $1 AND kind = $2 AND expires_at > $3
