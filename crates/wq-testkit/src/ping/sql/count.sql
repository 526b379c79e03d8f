-- Rows of one kind.
SELECT count(*) FROM ping_log WHERE kind = $1
