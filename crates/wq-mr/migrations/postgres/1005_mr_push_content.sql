-- What each push carried: the content hash and the target branch its commit
-- was built on. A change request can merge a head older than the last push
-- (a merge queue or train merged it while the next content was being
-- pushed); the merged head then says which submission reached the target.
-- Pushes from before this migration leave both unset.
ALTER TABLE mr_pushes ADD COLUMN content_hash text;
ALTER TABLE mr_pushes ADD COLUMN target_branch text;
