-- Ports that sandboxes publish over HTTP; the token is kept as its hash.
CREATE TABLE previews (
	id         TEXT PRIMARY KEY,
	team_id    TEXT NOT NULL REFERENCES teams (id),
	sandbox_id TEXT NOT NULL REFERENCES sandboxes (id),
	port       INTEGER NOT NULL,
	visibility TEXT NOT NULL,
	wake       INTEGER NOT NULL DEFAULT 0,
	token_hash TEXT NOT NULL DEFAULT '',
	created_at TEXT NOT NULL
);

CREATE UNIQUE INDEX previews_port ON previews (sandbox_id, port);
