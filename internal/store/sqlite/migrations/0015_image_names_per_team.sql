-- Image names are unique per team, no longer across the server: two teams
-- may each have an image called x. Another team reaches a shared image as
-- OWNER/NAME (its owner team's name), so sandboxes and workloads of other
-- teams that named a shared image by its bare name now name it so; the
-- owner's keep the bare name, which still means its own image.
UPDATE sandboxes SET template = (
	SELECT t.name || '/' || i.name FROM images i JOIN teams t ON t.id = i.team_id
	WHERE i.name = sandboxes.template)
WHERE template IN (SELECT name FROM images)
	AND team_id <> (SELECT team_id FROM images WHERE images.name = sandboxes.template);

UPDATE workloads SET data = json_set(data, '$.template', (
	SELECT t.name || '/' || i.name FROM images i JOIN teams t ON t.id = i.team_id
	WHERE i.name = json_extract(workloads.data, '$.template')))
WHERE json_extract(data, '$.template') IN (SELECT name FROM images)
	AND team_id <> (SELECT team_id FROM images WHERE images.name = json_extract(workloads.data, '$.template'));

CREATE TABLE images_by_team (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	team_id    TEXT NOT NULL REFERENCES teams (id),
	digest     TEXT NOT NULL,
	size_bytes INTEGER NOT NULL DEFAULT 0,
	config     TEXT NOT NULL,
	settings   TEXT NOT NULL,
	created_at TEXT NOT NULL,
	updated_at TEXT NOT NULL,
	UNIQUE (team_id, name)
);
INSERT INTO images_by_team SELECT id, name, team_id, digest, size_bytes, config, settings, created_at, updated_at FROM images;
DROP TABLE images;
ALTER TABLE images_by_team RENAME TO images;
CREATE INDEX images_digest ON images (digest);
