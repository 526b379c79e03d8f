-- The loop's exit (DDR-49): the only statement that writes actionable =
-- false, run under the item's advisory lock in the transaction that just saw
-- no pending events (DDR-34). Releases the lease. $1 id, $2 the holder's
-- leased_until.
UPDATE work_items
SET actionable = false,
    leased_until = NULL
WHERE id = $1
  AND leased_until = $2  -- still our lease
