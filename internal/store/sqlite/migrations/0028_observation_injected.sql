-- Requests the network gateway added an injection rule's header to
-- (network.inject), per observation, and the status of the latest request
-- it terminated for a rule (0: none).
ALTER TABLE network_observations ADD COLUMN injected INTEGER NOT NULL DEFAULT 0;
ALTER TABLE network_observations ADD COLUMN last_status INTEGER NOT NULL DEFAULT 0;
