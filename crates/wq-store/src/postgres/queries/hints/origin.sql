-- Names this connection's store ($1) for the work hints its transactions
-- send (hints/work.sql), so that the store's own listener can tell them
-- from other replicas'.
SELECT set_config('wq.origin', $1, false)
