-- Volumes (issue #32): a team's disks that outlive sandboxes and are
-- mounted by several at once. node is where the files are ("" on a node
-- of its own); used_bytes is the last measurement.
CREATE TABLE volumes (
	id         text COLLATE "C" PRIMARY KEY,
	team_id    text COLLATE "C" NOT NULL REFERENCES teams (id),
	name       text NOT NULL,
	size_mib   bigint NOT NULL,
	used_bytes bigint NOT NULL DEFAULT 0,
	node       text NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL,
	UNIQUE (team_id, name)
);

-- The volumes a sandbox mounts (api.VolumeMount, volume_id set): set at
-- create, never changed; a start, wake or attach mounts them again.
ALTER TABLE sandboxes ADD COLUMN volumes jsonb NOT NULL DEFAULT '[]';
