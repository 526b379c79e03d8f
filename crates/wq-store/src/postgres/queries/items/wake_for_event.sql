-- Sets actionable = true in the transaction that stores an event (DDR-49),
-- under the item's advisory lock, so an item with a pending event is always
-- sweep-visible and never parked past it. $1 id.
UPDATE work_items
SET actionable = true
WHERE id = $1
