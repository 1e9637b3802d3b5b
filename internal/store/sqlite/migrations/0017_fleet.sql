-- The nodes of a fleet (`cove control`), where each sandbox is placed and
-- the save it would wake from, and the join service's named values (its
-- CA, the join token's hash). A node's name is unique among nodes that are
-- not removed.
CREATE TABLE nodes (
	id            TEXT PRIMARY KEY,
	name          TEXT NOT NULL,
	addr          TEXT NOT NULL,
	state         TEXT NOT NULL,
	epoch         INTEGER NOT NULL,
	capacity      TEXT NOT NULL,
	registered_at TEXT,
	created_at    TEXT NOT NULL
);

CREATE UNIQUE INDEX nodes_name ON nodes (name) WHERE state != 'removed';

CREATE TABLE placements (
	sandbox_id   TEXT PRIMARY KEY,
	node_id      TEXT NOT NULL,
	epoch        INTEGER NOT NULL,
	resources    TEXT NOT NULL,
	save         TEXT NOT NULL DEFAULT '',
	save_node_id TEXT NOT NULL DEFAULT '',
	save_bytes   INTEGER NOT NULL DEFAULT 0,
	saved_at     TEXT
);

CREATE INDEX placements_node ON placements (node_id, sandbox_id);

CREATE TABLE fleet_values (
	name  TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
