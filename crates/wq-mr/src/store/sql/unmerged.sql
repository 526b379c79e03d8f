-- Whether item $1's latest submitted state is not what merged. The merged
-- head ($2) is looked up among the branch line's pushes: the content and
-- target branch that push carried. A head that is no push of the line's
-- with what it carried (a person's commit, a push from before migration
-- 1005) or no head at all: the content or target branch other than the
-- last push's.
SELECT COALESCE(
    (SELECT p.content_hash <> d.content_hash OR p.target_branch <> d.target_branch
     FROM mr_pushes p
     WHERE p.forge = d.forge AND lower(p.project) = lower(d.project)
       AND p.source_branch = d.source_branch AND p.head_sha = $2
       AND p.content_hash IS NOT NULL AND p.target_branch IS NOT NULL
     ORDER BY p.pushed_at DESC
     LIMIT 1),
    COALESCE(d.pushed_content_hash, '') <> d.content_hash
        OR COALESCE(d.pushed_target_branch, d.target_branch) <> d.target_branch
)
FROM mr_details d
WHERE d.work_item_id = $1
