-- Appends audit records in order, each chained to its item's head: see
-- wq_audit_append in migration 0008. $1 the records as a JSON array.
SELECT wq_audit_append($1)
