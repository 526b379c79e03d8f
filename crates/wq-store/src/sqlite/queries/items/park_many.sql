-- The loop's exit for many items at once (the parks that arrive together,
-- in the writer's transaction, so no event can commit in between, DDR-34):
-- for each park whose lease is still held, its outcome if it has one
-- (attempts 0, phase, error, updated_at), then, unless events are pending,
-- actionable = 0 and the lease released. ?1: a JSON array of
-- {id, lease (µs), now (µs), write (0/1), phase, error}. Answers the parks
-- whose lease held; `parked` is 0 where events are pending (the lease is
-- kept and the loop goes on).
UPDATE work_items
SET attempts = CASE WHEN p.write THEN 0 ELSE work_items.attempts END,
    phase = CASE WHEN p.write THEN coalesce(p.phase, work_items.phase) ELSE work_items.phase END,
    error = CASE WHEN p.write THEN p.error ELSE work_items.error END,
    updated_at = CASE WHEN p.write THEN p.now ELSE work_items.updated_at END,
    actionable = CASE WHEN p.events_pending THEN work_items.actionable ELSE 0 END,
    leased_until = CASE WHEN p.events_pending THEN work_items.leased_until ELSE NULL END
FROM (
    SELECT value ->> 'id' AS id,
           value ->> 'lease' AS lease,
           value ->> 'now' AS now,
           value ->> 'write' AS write,
           value ->> 'phase' AS phase,
           value ->> 'error' AS error,
           EXISTS (SELECT 1 FROM pending_events AS e
                   WHERE e.work_item_id = value ->> 'id') AS events_pending
    FROM json_each(?1)
) AS p
WHERE work_items.id = p.id
  AND work_items.leased_until = p.lease  -- still our lease
