-- The host uid/gid range each sandbox holds, from its create until its
-- runtime, disk and save are gone. Keyed by sandbox ID alone (no foreign
-- key): a warm pool's sandbox holds one before its row exists. Sandboxes
-- created before this table hold none and keep the range all shared.
CREATE TABLE id_ranges (
	sandbox_id TEXT PRIMARY KEY,
	host_id    INTEGER NOT NULL UNIQUE,
	size       INTEGER NOT NULL
);
