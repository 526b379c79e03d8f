-- PostgreSQL adds the wq_park function here, to run the loop's exit step in
-- one round trip. SQLite runs the same steps as an in-process transaction in
-- the store, so it needs no schema change; this migration keeps both
-- backends' migration lists alike.
SELECT 1;
