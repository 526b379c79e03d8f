-- PostgreSQL's migration 0017 stores the records' JSON fields as json
-- (their text) instead of jsonb; SQLite always kept them as text. This
-- migration keeps both backends' migration lists alike.
SELECT 1;
