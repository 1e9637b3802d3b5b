-- Volumes (issue #32): a team's disks that outlive sandboxes and are
-- mounted by several at once. node is where the files are ("" on a node
-- of its own); used_bytes is the last measurement.
CREATE TABLE volumes (
	id         TEXT PRIMARY KEY,
	team_id    TEXT NOT NULL REFERENCES teams (id),
	name       TEXT NOT NULL,
	size_mib   INTEGER NOT NULL,
	used_bytes INTEGER NOT NULL DEFAULT 0,
	node       TEXT NOT NULL DEFAULT '',
	created_at TEXT NOT NULL,
	UNIQUE (team_id, name)
);

-- The volumes a sandbox mounts (api.VolumeMount, volume_id set), as JSON:
-- set at create, never changed; a start, wake or attach mounts them again.
ALTER TABLE sandboxes ADD COLUMN volumes TEXT NOT NULL DEFAULT '[]';
