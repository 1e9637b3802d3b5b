-- The replicas of a control plane on one store: named leases (the leader's)
-- taken and renewed by conditional writes, and each replica's last beat.
CREATE TABLE leases (
	name       TEXT PRIMARY KEY,
	holder     TEXT NOT NULL,
	term       INTEGER NOT NULL,
	expires_at TEXT NOT NULL
);

CREATE TABLE replicas (
	id         TEXT PRIMARY KEY,
	addr       TEXT NOT NULL,
	started_at TEXT NOT NULL,
	seen_at    TEXT NOT NULL
);

-- The replica that drives each sandbox's current transition, for the
-- leader to finish it when that replica dies.
CREATE TABLE sandbox_owners (
	sandbox_id TEXT PRIMARY KEY,
	replica_id TEXT NOT NULL
);
