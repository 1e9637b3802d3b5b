-- Times are RFC 3339 UTC text with nine fractional digits, so that they
-- sort as text; maps and structs are JSON text.

CREATE TABLE teams (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL UNIQUE,
	admission  TEXT NOT NULL DEFAULT '{}',
	created_at TEXT NOT NULL
);

CREATE TABLE api_keys (
	id         TEXT PRIMARY KEY,
	team_id    TEXT NOT NULL REFERENCES teams (id),
	hash       TEXT NOT NULL UNIQUE,
	created_at TEXT NOT NULL,
	revoked_at TEXT
);

CREATE INDEX api_keys_team ON api_keys (team_id);

CREATE TABLE sandboxes (
	id              TEXT PRIMARY KEY,
	team_id         TEXT NOT NULL REFERENCES teams (id),
	name            TEXT NOT NULL DEFAULT '',
	template        TEXT NOT NULL DEFAULT '',
	state           TEXT NOT NULL,
	resources       TEXT NOT NULL DEFAULT '{}',
	env             TEXT NOT NULL DEFAULT '{}',
	workdir         TEXT NOT NULL DEFAULT '',
	network         TEXT NOT NULL DEFAULT '{}',
	labels          TEXT NOT NULL DEFAULT '{}',
	idle_timeout_s  INTEGER NOT NULL DEFAULT 0,
	on_idle         TEXT NOT NULL DEFAULT '',
	max_lifetime_s  INTEGER NOT NULL DEFAULT 0,
	spend_limit_usd REAL,
	cost_usd        REAL NOT NULL DEFAULT 0,
	created_at      TEXT NOT NULL,
	started_at      TEXT,
	last_active_at  TEXT,
	expires_at      TEXT,
	state_reason    TEXT NOT NULL DEFAULT ''
);

-- A name belongs to at most one live sandbox of a team.
CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes (team_id, name)
	WHERE name != '' AND state NOT IN ('terminated', 'failed');

CREATE INDEX sandboxes_team_name ON sandboxes (team_id, name, created_at);
CREATE INDEX sandboxes_state ON sandboxes (state);

CREATE TABLE commands (
	id                TEXT PRIMARY KEY,
	sandbox_id        TEXT NOT NULL REFERENCES sandboxes (id),
	command           TEXT NOT NULL DEFAULT '',
	argv              TEXT NOT NULL DEFAULT '[]',
	cwd               TEXT NOT NULL DEFAULT '',
	env               TEXT NOT NULL DEFAULT '{}',
	user              TEXT NOT NULL DEFAULT '',
	timeout_s         INTEGER NOT NULL DEFAULT 0,
	stdin             INTEGER NOT NULL DEFAULT 0,
	pty               TEXT,
	no_output_alert_s INTEGER NOT NULL DEFAULT 0,
	state             TEXT NOT NULL,
	exit_code         INTEGER,
	signal            TEXT NOT NULL DEFAULT '',
	timed_out         INTEGER NOT NULL DEFAULT 0,
	started_at        TEXT NOT NULL,
	ended_at          TEXT,
	stdout_bytes      INTEGER NOT NULL DEFAULT 0,
	stderr_bytes      INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX commands_sandbox ON commands (sandbox_id, id);
CREATE INDEX commands_state ON commands (state);
