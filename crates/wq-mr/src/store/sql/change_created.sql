-- Whether workqueue opened change request $2 on the item's branch line (any
-- generation).
SELECT EXISTS (
    SELECT 1
    FROM mr_details o
    JOIN mr_details d ON d.work_item_id = $1
    WHERE o.forge = d.forge AND lower(o.project) = lower(d.project)
      AND o.source_branch = d.source_branch AND o.mr_number = $2 AND o.mr_created
)
