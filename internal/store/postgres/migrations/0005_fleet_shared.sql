-- Nodes shared by every control replica: a heartbeat on any replica
-- records when it was seen and what it can start (templates, GPU names),
-- so each replica's view of the fleet is read from here.
ALTER TABLE nodes ADD COLUMN gpu_names jsonb NOT NULL DEFAULT '[]';
ALTER TABLE nodes ADD COLUMN templates jsonb NOT NULL DEFAULT '[]';
ALTER TABLE nodes ADD COLUMN heartbeat_at timestamptz;
