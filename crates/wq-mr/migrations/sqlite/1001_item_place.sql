-- The generic row keeps each item's forge and project (wq-store migration
-- 0003, which runs before this one): fill it for merge requests stored
-- before that column existed.
UPDATE work_items
SET forge = d.forge, project = d.project
FROM mr_details AS d
WHERE d.work_item_id = work_items.id
  AND work_items.forge IS NULL;
