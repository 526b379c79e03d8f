-- Sets actionable = 1 in the transaction that stores an event (DDR-49), so an
-- item with a pending event is always sweep-visible. ?1 id.
UPDATE work_items
SET actionable = 1
WHERE id = ?1
