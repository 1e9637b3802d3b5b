-- Batch runs and their queue. The row's data is the workload as the API
-- shows it (JSON); the columns beside it are what the queue and the lists
-- select by.
CREATE TABLE workloads (
	id         TEXT PRIMARY KEY,
	team_id    TEXT NOT NULL REFERENCES teams (id),
	state      TEXT NOT NULL,
	created_at TEXT NOT NULL,
	data       TEXT NOT NULL
);

CREATE INDEX workloads_team ON workloads (team_id, id);
CREATE INDEX workloads_state ON workloads (state, id);
