-- PostgreSQL leaves half of each work_items page free here, so the loop's
-- updates of a row stay on its page (its migration 0011). SQLite has no
-- fill factor; this migration keeps both backends' migration lists alike.
SELECT 1;
