package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"
)

// migrations holds the schema, one numbered file per version:
// migrations/0001_init.sql, migrations/0002_….sql, …
//
//go:embed migrations/*.sql
var migrations embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads fsys's migrations/*.sql in version order.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	// Glob sorts by name, and versions are zero-padded.
	var ms []migration
	for _, name := range names {
		base := path.Base(name)
		prefix, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(prefix)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version number", base)
		}
		if len(ms) > 0 && v <= ms[len(ms)-1].version {
			return nil, fmt.Errorf("migration %s: version %d is not after %d", base, v, ms[len(ms)-1].version)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: base, sql: string(b)})
	}
	return ms, nil
}

// migrate applies the migrations of fsys that db lacks, each in its own
// transaction, and returns how many it applied.
func migrate(ctx context.Context, db *sql.DB, fsys fs.FS, now func() time.Time) (int, error) {
	ms, err := loadMigrations(fsys)
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
			return applied, fmt.Errorf("apply %s: %w", m.name, err)
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
func refuseNewer(ctx context.Context, db *sql.DB, known []migration) error {
	newest := 0
	if len(known) > 0 {
		newest = known[len(known)-1].version
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
func applyMigration(ctx context.Context, db *sql.DB, m migration, now time.Time) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var done bool
	err = tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?)", m.version).Scan(&done)
	if err != nil || done {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return false, err
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
		m.version, m.name, formatTime(now))
	if err != nil {
		return false, err
	}
	return true, tx.Commit()
}
