-- Metering: samples of running sandboxes (raw, and 1-minute rollups kept
-- longer), usage accrued per sandbox and hour, the meter's progress per
-- sandbox, and what budgets have already alerted.

ALTER TABLE sandboxes ADD COLUMN on_budget TEXT NOT NULL DEFAULT 'sleep';
ALTER TABLE sandboxes ADD COLUMN budget_alerts TEXT NOT NULL DEFAULT '[50,80]';

ALTER TABLE teams ADD COLUMN spend_limit_usd REAL;
ALTER TABLE teams ADD COLUMN budget_alerts TEXT NOT NULL DEFAULT '[50,80]';

CREATE TABLE samples (
	sandbox_id        TEXT NOT NULL,
	time              TEXT NOT NULL,
	cpu_millicores    INTEGER NOT NULL,
	memory_bytes      INTEGER NOT NULL,
	memory_peak_bytes INTEGER NOT NULL,
	disk_bytes        INTEGER NOT NULL,
	net_in_bytes      INTEGER NOT NULL,
	net_out_bytes     INTEGER NOT NULL,
	PRIMARY KEY (sandbox_id, time)
) WITHOUT ROWID;

CREATE INDEX samples_time ON samples (time);

-- One row per sandbox and minute: sums and maxima of the samples in it.
CREATE TABLE sample_minutes (
	sandbox_id         TEXT NOT NULL,
	minute             TEXT NOT NULL,
	n                  INTEGER NOT NULL,
	cpu_sum            INTEGER NOT NULL,
	cpu_max            INTEGER NOT NULL,
	memory_sum         INTEGER NOT NULL,
	memory_max         INTEGER NOT NULL,
	memory_peak_max    INTEGER NOT NULL,
	disk_sum           INTEGER NOT NULL,
	disk_max           INTEGER NOT NULL,
	net_in_bytes       INTEGER NOT NULL,
	net_out_bytes      INTEGER NOT NULL,
	PRIMARY KEY (sandbox_id, minute)
) WITHOUT ROWID;

CREATE INDEX sample_minutes_minute ON sample_minutes (minute);

CREATE TABLE usage_hours (
	sandbox_id    TEXT NOT NULL REFERENCES sandboxes (id),
	team_id       TEXT NOT NULL,
	hour          TEXT NOT NULL,
	cpu_s         REAL NOT NULL DEFAULT 0,
	memory_gib_s  REAL NOT NULL DEFAULT 0,
	storage_gib_h REAL NOT NULL DEFAULT 0,
	egress_bytes  INTEGER NOT NULL DEFAULT 0,
	cost_usd      REAL NOT NULL DEFAULT 0,
	PRIMARY KEY (sandbox_id, hour)
) WITHOUT ROWID;

CREATE INDEX usage_hours_team ON usage_hours (team_id, hour);

CREATE TABLE meters (
	sandbox_id    TEXT PRIMARY KEY REFERENCES sandboxes (id),
	accrued_until TEXT,
	stored_bytes  INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE budget_states (
	key      TEXT PRIMARY KEY,
	alerted  TEXT NOT NULL DEFAULT '[]',
	exceeded INTEGER NOT NULL DEFAULT 0
);
