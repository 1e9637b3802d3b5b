package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

// migrations holds the schema, one numbered file per version:
// migrations/0001_init.sql, migrations/0002_….sql, …
//
//go:embed migrations/*.sql
var migrations embed.FS

// migrate applies the migrations of fsys that db lacks, each in its own
// transaction, and returns how many it applied.
func migrate(ctx context.Context, db *sql.DB, fsys fs.FS, now func() time.Time) (int, error) {
	ms, err := store.LoadMigrations(fsys)
	if err != nil {
		return 0, fmt.Errorf("load migrations: %w", err)
	}
	const create = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at TEXT NOT NULL
	)`
	if _, err := db.ExecContext(ctx, create); err != nil {
		return 0, fmt.Errorf("create schema_migrations: %w", err)
	}
	if err := refuseNewer(ctx, db, ms); err != nil {
		return 0, err
	}
	applied := 0
	for _, m := range ms {
		ok, err := applyMigration(ctx, db, m, now())
		if err != nil {
			return applied, fmt.Errorf("apply %s: %w", m.Name, err)
		}
		if ok {
			applied++
		}
	}
	return applied, nil
}

// ErrSchemaNewer is wrapped by the error of opening a database whose
// schema a newer cove wrote.
var ErrSchemaNewer = errors.New("the database's schema is newer than this cove")

// refuseNewer refuses a database that has a migration this binary does
// not know (a newer cove applied it): running on it could misread or
// drop what the newer schema keeps. A downgrade needs the backup taken
// before the upgrade.
func refuseNewer(ctx context.Context, db *sql.DB, known []store.Migration) error {
	newest := 0
	if len(known) > 0 {
		newest = known[len(known)-1].Version
	}
	var version int
	var name string
	err := db.QueryRowContext(ctx, "SELECT version, name FROM schema_migrations ORDER BY version DESC LIMIT 1").Scan(&version, &name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("read the schema's version: %w", err)
	case version > newest:
		return fmt.Errorf("%w: it is at version %d (%s), this cove knows versions up to %d; run the cove that wrote it (or a newer one), or restore the backup taken before the upgrade",
			ErrSchemaNewer, version, name, newest)
	}
	return nil
}

// applyMigration applies m unless it already is. It checks inside the
// (immediate) transaction so that two processes opening the same file at
// once apply m only once.
func applyMigration(ctx context.Context, db *sql.DB, m store.Migration, now time.Time) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var done bool
	err = tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?)", m.Version).Scan(&done)
	if err != nil || done {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return false, err
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
		m.Version, m.Name, formatTime(now))
	if err != nil {
		return false, err
	}
	return true, tx.Commit()
}
