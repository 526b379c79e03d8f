-- Whether `head` ($2) was pushed by workqueue on the item's branch line
-- (same forge, project, source branch; any generation), and whether the item
-- has a push whose result was not recorded.
SELECT EXISTS (
           SELECT 1
           FROM mr_pushes p
           JOIN mr_details d ON d.work_item_id = $1
           WHERE p.forge = d.forge AND lower(p.project) = lower(d.project)
             AND p.source_branch = d.source_branch AND p.head_sha = $2
       ) AS pushed,
       EXISTS (
           SELECT 1 FROM mr_details WHERE work_item_id = $1 AND push_intent_at IS NOT NULL
       ) AS intent
