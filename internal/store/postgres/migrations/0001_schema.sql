-- cove's schema on PostgreSQL: the tables and columns of the SQLite store
-- after its migration 0017, with native types (times are timestamptz,
-- flags boolean, maps and structs jsonb, bytes bytea), so that a SQLite
-- database copies into this one table by table and column by column.
-- Text compares bytewise (COLLATE "C") as in SQLite, whatever the
-- database's locale: IDs page and names sort the same in both stores.

CREATE TABLE teams (
	id              text COLLATE "C" PRIMARY KEY,
	name            text COLLATE "C" NOT NULL UNIQUE,
	admission       jsonb NOT NULL DEFAULT '{}',
	created_at      timestamptz NOT NULL,
	spend_limit_usd double precision,
	budget_alerts   jsonb NOT NULL DEFAULT '[50,80]'
);

CREATE TABLE api_keys (
	id         text COLLATE "C" PRIMARY KEY,
	team_id    text COLLATE "C" NOT NULL REFERENCES teams (id),
	hash       text COLLATE "C" NOT NULL UNIQUE,
	created_at timestamptz NOT NULL,
	revoked_at timestamptz
);

CREATE INDEX api_keys_team ON api_keys (team_id);

CREATE TABLE sandboxes (
	id              text COLLATE "C" PRIMARY KEY,
	team_id         text COLLATE "C" NOT NULL REFERENCES teams (id),
	name            text COLLATE "C" NOT NULL DEFAULT '',
	template        text COLLATE "C" NOT NULL DEFAULT '',
	state           text COLLATE "C" NOT NULL,
	resources       jsonb NOT NULL DEFAULT '{}',
	env             jsonb NOT NULL DEFAULT '{}',
	workdir         text COLLATE "C" NOT NULL DEFAULT '',
	network         jsonb NOT NULL DEFAULT '{}',
	labels          jsonb NOT NULL DEFAULT '{}',
	idle_timeout_s  bigint NOT NULL DEFAULT 0,
	on_idle         text COLLATE "C" NOT NULL DEFAULT '',
	max_lifetime_s  bigint NOT NULL DEFAULT 0,
	spend_limit_usd double precision,
	cost_usd        double precision NOT NULL DEFAULT 0,
	created_at      timestamptz NOT NULL,
	started_at      timestamptz,
	last_active_at  timestamptz,
	expires_at      timestamptz,
	state_reason    text COLLATE "C" NOT NULL DEFAULT '',
	secrets         jsonb NOT NULL DEFAULT '{}',
	on_budget       text COLLATE "C" NOT NULL DEFAULT 'sleep',
	budget_alerts   jsonb NOT NULL DEFAULT '[50,80]',
	provision       jsonb NOT NULL DEFAULT '{}'
);

-- A name belongs to at most one live sandbox of a team.
CREATE UNIQUE INDEX sandboxes_live_name ON sandboxes (team_id, name)
	WHERE name <> '' AND state NOT IN ('terminated', 'failed');

CREATE INDEX sandboxes_team_name ON sandboxes (team_id, name, created_at);
CREATE INDEX sandboxes_state ON sandboxes (state);
CREATE INDEX sandboxes_template ON sandboxes (template, state);

CREATE TABLE commands (
	id                text COLLATE "C" PRIMARY KEY,
	sandbox_id        text COLLATE "C" NOT NULL REFERENCES sandboxes (id),
	command           text COLLATE "C" NOT NULL DEFAULT '',
	argv              jsonb NOT NULL DEFAULT '[]',
	cwd               text COLLATE "C" NOT NULL DEFAULT '',
	env               jsonb NOT NULL DEFAULT '{}',
	"user"            text COLLATE "C" NOT NULL DEFAULT '',
	timeout_s         bigint NOT NULL DEFAULT 0,
	stdin             boolean NOT NULL DEFAULT false,
	pty               jsonb,
	no_output_alert_s bigint NOT NULL DEFAULT 0,
	state             text COLLATE "C" NOT NULL,
	exit_code         bigint,
	signal            text COLLATE "C" NOT NULL DEFAULT '',
	timed_out         boolean NOT NULL DEFAULT false,
	started_at        timestamptz NOT NULL,
	ended_at          timestamptz,
	stdout_bytes      bigint NOT NULL DEFAULT 0,
	stderr_bytes      bigint NOT NULL DEFAULT 0,
	secrets           jsonb NOT NULL DEFAULT '{}'
);

CREATE INDEX commands_sandbox ON commands (sandbox_id, id);
CREATE INDEX commands_state ON commands (state);

-- The team event log. seq orders it; an event's ID is made from seq so that
-- IDs sort in the order events were appended and serve as cursors.
CREATE TABLE events (
	seq        bigserial PRIMARY KEY,
	team_id    text COLLATE "C" NOT NULL REFERENCES teams (id),
	type       text COLLATE "C" NOT NULL,
	sandbox_id text COLLATE "C" NOT NULL DEFAULT '',
	command_id text COLLATE "C" NOT NULL DEFAULT '',
	time       timestamptz NOT NULL,
	data       jsonb NOT NULL DEFAULT '{}'
);

CREATE INDEX events_team ON events (team_id, seq);
CREATE INDEX events_time ON events (time);

-- Answers to create requests that carried an Idempotency-Key.
CREATE TABLE idempotency (
	team_id      text COLLATE "C" NOT NULL REFERENCES teams (id),
	key          text COLLATE "C" NOT NULL,
	request_hash text COLLATE "C" NOT NULL,
	status       integer NOT NULL,
	body         bytea NOT NULL,
	created_at   timestamptz NOT NULL,
	PRIMARY KEY (team_id, key)
);

-- The host uid/gid range each sandbox holds (no foreign key: a warm
-- pool's sandbox holds one before its row exists).
CREATE TABLE id_ranges (
	sandbox_id text COLLATE "C" PRIMARY KEY,
	host_id    bigint NOT NULL UNIQUE,
	size       bigint NOT NULL
);

-- What sandboxes did on the network, one row per sandbox, destination,
-- port, decision and reason.
CREATE TABLE network_observations (
	sandbox_id      text COLLATE "C" NOT NULL REFERENCES sandboxes (id),
	destination     text COLLATE "C" NOT NULL,
	port            integer NOT NULL,
	decision        text COLLATE "C" NOT NULL,
	reason          text COLLATE "C" NOT NULL DEFAULT '',
	count           bigint NOT NULL DEFAULT 0,
	bytes_out       bigint NOT NULL DEFAULT 0,
	bytes_in        bigint NOT NULL DEFAULT 0,
	first_seen      timestamptz NOT NULL,
	last_seen       timestamptz NOT NULL,
	last_command_id text COLLATE "C" NOT NULL DEFAULT '',
	PRIMARY KEY (sandbox_id, destination, port, decision, reason)
);

CREATE INDEX network_observations_last_seen ON network_observations (last_seen);

-- Teams' secrets, sealed under the key key_id: the database never holds a
-- value.
CREATE TABLE secrets (
	team_id    text COLLATE "C" NOT NULL REFERENCES teams (id),
	name       text COLLATE "C" NOT NULL,
	key_id     text COLLATE "C" NOT NULL,
	nonce      bytea NOT NULL,
	ciphertext bytea NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (team_id, name)
);

CREATE INDEX secrets_key ON secrets (key_id);

-- Metering: raw samples, their 1-minute rollups, usage per sandbox (or
-- workload) and hour, the meter's progress and budgets' alerts.
CREATE TABLE samples (
	sandbox_id        text COLLATE "C" NOT NULL,
	time              timestamptz NOT NULL,
	cpu_millicores    bigint NOT NULL,
	memory_bytes      bigint NOT NULL,
	memory_peak_bytes bigint NOT NULL,
	disk_bytes        bigint NOT NULL,
	net_in_bytes      bigint NOT NULL,
	net_out_bytes     bigint NOT NULL,
	PRIMARY KEY (sandbox_id, time)
);

CREATE INDEX samples_time ON samples (time);

CREATE TABLE sample_minutes (
	sandbox_id      text COLLATE "C" NOT NULL,
	minute          timestamptz NOT NULL,
	n               bigint NOT NULL,
	cpu_sum         bigint NOT NULL,
	cpu_max         bigint NOT NULL,
	memory_sum      bigint NOT NULL,
	memory_max      bigint NOT NULL,
	memory_peak_max bigint NOT NULL,
	disk_sum        bigint NOT NULL,
	disk_max        bigint NOT NULL,
	net_in_bytes    bigint NOT NULL,
	net_out_bytes   bigint NOT NULL,
	PRIMARY KEY (sandbox_id, minute)
);

CREATE INDEX sample_minutes_minute ON sample_minutes (minute);

CREATE TABLE usage_hours (
	sandbox_id    text COLLATE "C" NOT NULL,
	team_id       text COLLATE "C" NOT NULL,
	hour          timestamptz NOT NULL,
	cpu_s         double precision NOT NULL DEFAULT 0,
	memory_gib_s  double precision NOT NULL DEFAULT 0,
	storage_gib_h double precision NOT NULL DEFAULT 0,
	egress_bytes  bigint NOT NULL DEFAULT 0,
	cost_usd      double precision NOT NULL DEFAULT 0,
	gpu_s         double precision NOT NULL DEFAULT 0,
	PRIMARY KEY (sandbox_id, hour)
);

CREATE INDEX usage_hours_team ON usage_hours (team_id, hour);

CREATE TABLE meters (
	sandbox_id    text COLLATE "C" PRIMARY KEY REFERENCES sandboxes (id),
	accrued_until timestamptz,
	stored_bytes  bigint NOT NULL DEFAULT 0
);

CREATE TABLE budget_states (
	key      text COLLATE "C" PRIMARY KEY,
	alerted  jsonb NOT NULL DEFAULT '[]',
	exceeded boolean NOT NULL DEFAULT false
);

-- Webhook endpoints of a team and their outbox: one delivery per event and
-- webhook, enqueued in the transaction that appends the event.
CREATE TABLE webhooks (
	id         text COLLATE "C" PRIMARY KEY,
	team_id    text COLLATE "C" NOT NULL REFERENCES teams (id),
	url        text COLLATE "C" NOT NULL,
	events     jsonb NOT NULL DEFAULT '[]',
	secret     text COLLATE "C" NOT NULL,
	created_at timestamptz NOT NULL
);

CREATE INDEX webhooks_team ON webhooks (team_id, id);

CREATE TABLE webhook_deliveries (
	seq             bigserial PRIMARY KEY,
	webhook_id      text COLLATE "C" NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
	event_seq       bigint NOT NULL,
	event_type      text COLLATE "C" NOT NULL,
	state           text COLLATE "C" NOT NULL,
	attempt_count   integer NOT NULL DEFAULT 0,
	attempts        jsonb NOT NULL DEFAULT '[]',
	next_attempt_at timestamptz,
	created_at      timestamptz NOT NULL,
	team_id         text COLLATE "C" NOT NULL DEFAULT '',
	urgent          boolean NOT NULL DEFAULT false,
	reason          text COLLATE "C" NOT NULL DEFAULT ''
);

CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, seq);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id, urgent DESC, seq) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_backlog ON webhook_deliveries (team_id, seq) WHERE state = 'pending' AND NOT urgent;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt_at);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_seq);

-- Assets (a team's archives, content-addressed) and the setup cache.
CREATE TABLE assets (
	id         text COLLATE "C" PRIMARY KEY,
	team_id    text COLLATE "C" NOT NULL REFERENCES teams (id),
	name       text COLLATE "C" NOT NULL DEFAULT '',
	size       bigint NOT NULL,
	sha256     text COLLATE "C" NOT NULL,
	created_at timestamptz NOT NULL
);

CREATE UNIQUE INDEX assets_team_sha256 ON assets (team_id, sha256);

CREATE TABLE setup_cache (
	team_id      text COLLATE "C" NOT NULL REFERENCES teams (id),
	key          text COLLATE "C" NOT NULL,
	save_id      text COLLATE "C" NOT NULL,
	size         bigint NOT NULL,
	created_at   timestamptz NOT NULL,
	last_used_at timestamptz NOT NULL,
	PRIMARY KEY (team_id, key)
);

-- Ports that sandboxes publish over HTTP; the token is kept as its hash.
CREATE TABLE previews (
	id         text COLLATE "C" PRIMARY KEY,
	team_id    text COLLATE "C" NOT NULL REFERENCES teams (id),
	sandbox_id text COLLATE "C" NOT NULL REFERENCES sandboxes (id),
	port       integer NOT NULL,
	visibility text COLLATE "C" NOT NULL,
	wake       boolean NOT NULL DEFAULT false,
	token_hash text COLLATE "C" NOT NULL DEFAULT '',
	created_at timestamptz NOT NULL
);

CREATE UNIQUE INDEX previews_port ON previews (sandbox_id, port);

-- Images imported from OCI artifacts, named per team.
CREATE TABLE images (
	id         text COLLATE "C" PRIMARY KEY,
	name       text COLLATE "C" NOT NULL,
	team_id    text COLLATE "C" NOT NULL REFERENCES teams (id),
	digest     text COLLATE "C" NOT NULL,
	size_bytes bigint NOT NULL DEFAULT 0,
	config     jsonb NOT NULL,
	settings   jsonb NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL,
	UNIQUE (team_id, name)
);

CREATE INDEX images_digest ON images (digest);

-- Batch runs and their queue: data is the workload as the API shows it.
CREATE TABLE workloads (
	id         text COLLATE "C" PRIMARY KEY,
	team_id    text COLLATE "C" NOT NULL REFERENCES teams (id),
	state      text COLLATE "C" NOT NULL,
	created_at timestamptz NOT NULL,
	data       jsonb NOT NULL
);

CREATE INDEX workloads_team ON workloads (team_id, id);
CREATE INDEX workloads_state ON workloads (state, id);

-- The nodes of a fleet, where each sandbox is placed, and the join
-- service's named values.
CREATE TABLE nodes (
	id            text COLLATE "C" PRIMARY KEY,
	name          text COLLATE "C" NOT NULL,
	addr          text COLLATE "C" NOT NULL,
	state         text COLLATE "C" NOT NULL,
	epoch         bigint NOT NULL,
	capacity      jsonb NOT NULL,
	registered_at timestamptz,
	created_at    timestamptz NOT NULL
);

CREATE UNIQUE INDEX nodes_name ON nodes (name) WHERE state <> 'removed';

CREATE TABLE placements (
	sandbox_id   text COLLATE "C" PRIMARY KEY,
	node_id      text COLLATE "C" NOT NULL,
	epoch        bigint NOT NULL,
	resources    jsonb NOT NULL,
	save         text COLLATE "C" NOT NULL DEFAULT '',
	save_node_id text COLLATE "C" NOT NULL DEFAULT '',
	save_bytes   bigint NOT NULL DEFAULT 0,
	saved_at     timestamptz
);

CREATE INDEX placements_node ON placements (node_id, sandbox_id);

CREATE TABLE fleet_values (
	name  text COLLATE "C" PRIMARY KEY,
	value text COLLATE "C" NOT NULL
);
