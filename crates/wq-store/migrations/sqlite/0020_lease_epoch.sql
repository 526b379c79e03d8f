-- Which claim of an item a run holds (wq_core::LeaseEpoch): every claim
-- draws the item's next number and heartbeats keep it, so
-- items/finish_leased.sql ends an item only under the claim its caller
-- names. Before, any unexpired lease passed, another run's too.
ALTER TABLE work_items ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0;
