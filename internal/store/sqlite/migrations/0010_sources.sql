-- Sources, setup and assets (issue #13). provision is JSON: the sandbox's
-- source, setup, setup command and whether the setup came from the cache.
ALTER TABLE sandboxes ADD COLUMN provision TEXT NOT NULL DEFAULT '{}';

-- An asset is a team's archive, content-addressed: its bytes are stored
-- once per team under their sha-256, and one row names them.
CREATE TABLE assets (
	id         TEXT PRIMARY KEY,
	team_id    TEXT NOT NULL REFERENCES teams (id),
	name       TEXT NOT NULL DEFAULT '',
	size       INTEGER NOT NULL,
	sha256     TEXT NOT NULL,
	created_at TEXT NOT NULL
);

CREATE UNIQUE INDEX assets_team_sha256 ON assets (team_id, sha256);

-- A setup cache entry: a sandbox's disk saved once its setup succeeded,
-- under a key of template, source digest and setup; evicted least
-- recently used first.
CREATE TABLE setup_cache (
	team_id      TEXT NOT NULL REFERENCES teams (id),
	key          TEXT NOT NULL,
	save_id      TEXT NOT NULL,
	size         INTEGER NOT NULL,
	created_at   TEXT NOT NULL,
	last_used_at TEXT NOT NULL,
	PRIMARY KEY (team_id, key)
);
