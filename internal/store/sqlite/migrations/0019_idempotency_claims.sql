-- An Idempotency-Key is claimed before its request runs, so that any
-- replica sees a request in flight: a pending record has status 0 and the
-- replica running it as owner. seed derives the IDs the request creates, so
-- a replica that takes a dead owner's claim over finds what it created.
ALTER TABLE idempotency ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE idempotency ADD COLUMN seed BLOB NOT NULL DEFAULT x'';
