-- Images imported from OCI artifacts; several names may share one stored
-- tree (digest). config is the image's OCI config, settings cove's.
CREATE TABLE images (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL UNIQUE,
	team_id    TEXT NOT NULL REFERENCES teams (id),
	digest     TEXT NOT NULL,
	size_bytes INTEGER NOT NULL DEFAULT 0,
	config     TEXT NOT NULL,
	settings   TEXT NOT NULL,
	created_at TEXT NOT NULL,
	updated_at TEXT NOT NULL
);

CREATE INDEX images_digest ON images (digest);
CREATE INDEX sandboxes_template ON sandboxes (template, state);
