-- Fair, bounded webhook outboxes. Each delivery names its team, so that the
-- dispatcher takes deliveries team by team and a team's pending backlog is
-- counted (and bounded) on its own index. An urgent delivery (the notice
-- that deliveries were dropped) goes before the webhook's backlog. A
-- delivery failed without an attempt says why (backlog_full).
ALTER TABLE webhook_deliveries ADD COLUMN team_id TEXT NOT NULL DEFAULT '';
ALTER TABLE webhook_deliveries ADD COLUMN urgent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_deliveries ADD COLUMN reason TEXT NOT NULL DEFAULT '';
UPDATE webhook_deliveries
	SET team_id = COALESCE((SELECT w.team_id FROM webhooks w WHERE w.id = webhook_deliveries.webhook_id), '');

DROP INDEX webhook_deliveries_pending;
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id, urgent DESC, seq) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_backlog ON webhook_deliveries (team_id, seq) WHERE state = 'pending' AND urgent = 0;
