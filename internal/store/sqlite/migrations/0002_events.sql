-- The team event log. seq orders it; an event's ID is made from seq so that
-- IDs sort in the order events were appended and serve as cursors.
CREATE TABLE events (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	team_id    TEXT NOT NULL REFERENCES teams (id),
	type       TEXT NOT NULL,
	sandbox_id TEXT NOT NULL DEFAULT '',
	command_id TEXT NOT NULL DEFAULT '',
	time       TEXT NOT NULL,
	data       TEXT NOT NULL DEFAULT '{}'
);

CREATE INDEX events_team ON events (team_id, seq);
