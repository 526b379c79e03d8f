-- The forge and project an item belongs to, when its type has that notion
-- (NULL otherwise), so a reader's read scope can narrow a listing in SQL.
-- An item type backfills its existing rows in its own migration.
ALTER TABLE work_items ADD COLUMN forge text;
ALTER TABLE work_items ADD COLUMN project text;

-- Listing narrowed to a reader's projects, newest first.
CREATE INDEX work_items_project_id ON work_items (project, id);
