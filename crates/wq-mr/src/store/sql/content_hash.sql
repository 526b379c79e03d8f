-- The content hash of an item's latest submitted state.
SELECT content_hash FROM mr_details WHERE work_item_id = $1
