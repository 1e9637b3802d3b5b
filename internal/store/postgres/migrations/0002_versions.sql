-- Row versions of the rows more than one writer changes: an update
-- succeeds only on the version it read and stores the next one, so two
-- control-plane replicas changing one sandbox never lose either change.
ALTER TABLE sandboxes ADD COLUMN version bigint NOT NULL DEFAULT 1;
ALTER TABLE commands ADD COLUMN version bigint NOT NULL DEFAULT 1;
ALTER TABLE workloads ADD COLUMN version bigint NOT NULL DEFAULT 1;
ALTER TABLE previews ADD COLUMN version bigint NOT NULL DEFAULT 1;
