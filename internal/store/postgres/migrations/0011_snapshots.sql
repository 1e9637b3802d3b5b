-- Snapshots (issue #32): a sandbox's files frozen at one moment, kept by
-- the team. data is the snapshot (store.Snapshot: its chain of layers
-- included); the columns beside it are what queries select on.
CREATE TABLE snapshots (
	id         text COLLATE "C" PRIMARY KEY,
	team_id    text COLLATE "C" NOT NULL REFERENCES teams (id),
	name       text NOT NULL,
	sandbox_id text COLLATE "C" NOT NULL,
	size       bigint NOT NULL,
	created_at timestamptz NOT NULL,
	data       jsonb NOT NULL,
	UNIQUE (team_id, name)
);
CREATE INDEX snapshots_by_sandbox ON snapshots (team_id, sandbox_id);

-- What stands on a snapshot: a sandbox (its files are layered on it) or
-- another snapshot (taken of such a sandbox).
CREATE TABLE snapshot_users (
	snapshot_id text COLLATE "C" NOT NULL,
	user_id     text COLLATE "C" NOT NULL,
	PRIMARY KEY (snapshot_id, user_id)
);
CREATE INDEX snapshot_users_by_user ON snapshot_users (user_id);

-- The chain of snapshots a sandbox stands on, top first.
CREATE TABLE sandbox_layers (
	sandbox_id text COLLATE "C" PRIMARY KEY,
	layers     jsonb NOT NULL
);
