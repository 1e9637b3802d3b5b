-- Webhook endpoints of a team, and their outbox: one delivery per event and
-- webhook, enqueued in the transaction that appends the event. A delivery's
-- ID is made from seq, so deliveries sort in the order they were enqueued.
CREATE TABLE webhooks (
	id         TEXT PRIMARY KEY,
	team_id    TEXT NOT NULL REFERENCES teams (id),
	url        TEXT NOT NULL,
	events     TEXT NOT NULL DEFAULT '[]',
	secret     TEXT NOT NULL,
	created_at TEXT NOT NULL
);

CREATE INDEX webhooks_team ON webhooks (team_id, id);

CREATE TABLE webhook_deliveries (
	seq             INTEGER PRIMARY KEY AUTOINCREMENT,
	webhook_id      TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
	event_seq       INTEGER NOT NULL,
	event_type      TEXT NOT NULL,
	state           TEXT NOT NULL,
	attempt_count   INTEGER NOT NULL DEFAULT 0,
	attempts        TEXT NOT NULL DEFAULT '[]',
	next_attempt_at TEXT,
	created_at      TEXT NOT NULL
);

CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, seq);
-- The dispatcher takes each webhook's oldest pending delivery (so a backlog
-- costs it one step per webhook, not per delivery) and the earliest due
-- time of all.
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id, seq) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt_at);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_seq);
