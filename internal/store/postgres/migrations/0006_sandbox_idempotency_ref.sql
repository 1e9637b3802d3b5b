-- The ID an idempotent create derived from its Idempotency-Key, kept
-- when the sandbox it made has another (one taken from the warm pool):
-- a second attempt of the request finds the sandbox by it.
ALTER TABLE sandboxes ADD COLUMN idempotency_ref text COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX sandboxes_idempotency_ref ON sandboxes (team_id, idempotency_ref) WHERE idempotency_ref <> '';
