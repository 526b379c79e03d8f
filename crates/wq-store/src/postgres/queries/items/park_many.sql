-- Many parks with their audit records in one statement that commits alone:
-- see wq_park_many in migration 0008. $1 the parks as a JSON array.
SELECT wq_park_many($1)
