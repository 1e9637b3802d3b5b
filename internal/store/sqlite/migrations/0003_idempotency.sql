-- Answers to create requests that carried an Idempotency-Key, replayed when
-- the same key comes again.
CREATE TABLE idempotency (
	team_id      TEXT NOT NULL REFERENCES teams (id),
	key          TEXT NOT NULL,
	request_hash TEXT NOT NULL,
	status       INTEGER NOT NULL,
	body         BLOB NOT NULL,
	created_at   TEXT NOT NULL,
	PRIMARY KEY (team_id, key)
);
