-- The replicas of a control plane on one database: named leases (the
-- leader's) taken and renewed by conditional writes on the database's
-- clock, and each replica's last beat.
CREATE TABLE leases (
	name       text COLLATE "C" PRIMARY KEY,
	holder     text COLLATE "C" NOT NULL,
	term       bigint NOT NULL,
	expires_at timestamptz NOT NULL
);

CREATE TABLE replicas (
	id         text COLLATE "C" PRIMARY KEY,
	addr       text COLLATE "C" NOT NULL,
	started_at timestamptz NOT NULL,
	seen_at    timestamptz NOT NULL
);

-- The replica that drives each sandbox's current transition, for the
-- leader to finish it when that replica dies.
CREATE TABLE sandbox_owners (
	sandbox_id text COLLATE "C" PRIMARY KEY,
	replica_id text COLLATE "C" NOT NULL
);
