-- The status note's post is remembered before it leaves: the change
-- request a post started on (its note id is recorded only with the step's
-- outcome, which a crash can lose). A later run looks for the note by its
-- marker before posting on that change request; with no post started, the
-- first note is posted without listing the notes.
ALTER TABLE mr_details ADD COLUMN note_intent_number INTEGER;

-- Rows from before this migration may have posted a note on their change
-- request: they look for it first.
UPDATE mr_details SET note_intent_number = mr_number WHERE mr_number IS NOT NULL;
