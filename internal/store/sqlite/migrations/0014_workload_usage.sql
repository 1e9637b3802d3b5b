-- Workloads are charged like sandboxes: their usage lands in usage_hours
-- keyed by the workload's ID, so the column sandbox_id no longer refers
-- to sandboxes only (its foreign key goes), and GPU-seconds get a column.
CREATE TABLE usage_hours_new (
	sandbox_id    TEXT NOT NULL,
	team_id       TEXT NOT NULL,
	hour          TEXT NOT NULL,
	cpu_s         REAL NOT NULL DEFAULT 0,
	memory_gib_s  REAL NOT NULL DEFAULT 0,
	storage_gib_h REAL NOT NULL DEFAULT 0,
	egress_bytes  INTEGER NOT NULL DEFAULT 0,
	cost_usd      REAL NOT NULL DEFAULT 0,
	gpu_s         REAL NOT NULL DEFAULT 0,
	PRIMARY KEY (sandbox_id, hour)
) WITHOUT ROWID;

INSERT INTO usage_hours_new (sandbox_id, team_id, hour, cpu_s, memory_gib_s, storage_gib_h, egress_bytes, cost_usd)
	SELECT sandbox_id, team_id, hour, cpu_s, memory_gib_s, storage_gib_h, egress_bytes, cost_usd FROM usage_hours;

DROP TABLE usage_hours;
ALTER TABLE usage_hours_new RENAME TO usage_hours;
CREATE INDEX usage_hours_team ON usage_hours (team_id, hour);
