-- Teams' secrets, sealed (AES-256-GCM) under the key key_id: the database
-- never holds a value. Sandboxes and commands keep the names they use.
CREATE TABLE secrets (
	team_id    TEXT NOT NULL REFERENCES teams (id),
	name       TEXT NOT NULL,
	key_id     TEXT NOT NULL,
	nonce      BLOB NOT NULL,
	ciphertext BLOB NOT NULL,
	created_at TEXT NOT NULL,
	updated_at TEXT NOT NULL,
	PRIMARY KEY (team_id, name)
);

CREATE INDEX secrets_key ON secrets (key_id);

ALTER TABLE sandboxes ADD COLUMN secrets TEXT NOT NULL DEFAULT '{}';
ALTER TABLE commands ADD COLUMN secrets TEXT NOT NULL DEFAULT '{}';
