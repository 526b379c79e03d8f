-- A new session or sign-in link. ?1 id hash, ?2 kind, ?3 principal, ?4 CSRF token, ?5 created, ?6 expires.
INSERT INTO ui_sessions (id_hash, kind, principal, csrf_token, created_at, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
