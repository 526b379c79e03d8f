-- When the item's current streak of failures began: an outage (a forge down
-- or rate limited) is retried until it has lasted the engine's outage
-- budget, counted from here. Meaningful only while attempts > 0: the first
-- failure after a success (attempts 0) starts a new streak.
ALTER TABLE work_items ADD COLUMN failing_since timestamptz;
-- How many failures of the streak were outages: they do not count
-- against max_attempts. Like failing_since, meaningful only while
-- attempts > 0.
ALTER TABLE work_items ADD COLUMN outage_failures integer NOT NULL DEFAULT 0;
