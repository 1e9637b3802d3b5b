-- What sandboxes did on the network, one row per sandbox, destination, port,
-- decision and reason (a node limit's denial, else ''), with counts and bytes added up as the node reports them.
-- Rows outlive the sandbox's runtime (restart, sleep, termination) and
-- expire by last_seen, like events.
CREATE TABLE network_observations (
	sandbox_id      TEXT NOT NULL REFERENCES sandboxes (id),
	destination     TEXT NOT NULL,
	port            INTEGER NOT NULL,
	decision        TEXT NOT NULL,
	reason          TEXT NOT NULL DEFAULT '',
	count           INTEGER NOT NULL DEFAULT 0,
	bytes_out       INTEGER NOT NULL DEFAULT 0,
	bytes_in        INTEGER NOT NULL DEFAULT 0,
	first_seen      TEXT NOT NULL,
	last_seen       TEXT NOT NULL,
	last_command_id TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (sandbox_id, destination, port, decision, reason)
) WITHOUT ROWID;

CREATE INDEX network_observations_last_seen ON network_observations (last_seen);
