-- A command's tag: its caller's name for it (E2B's process tag), as
-- sent; '' for none.
ALTER TABLE commands ADD COLUMN tag TEXT NOT NULL DEFAULT '';
