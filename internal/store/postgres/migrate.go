package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cove-dev/cove/internal/store"
)

// migrations holds the schema, one numbered file per version:
// migrations/0001_schema.sql, migrations/0002_….sql, …
//
//go:embed migrations/*.sql
var migrations embed.FS

// migrate applies the migrations of fsys that the database lacks, each in
// its own transaction, and returns how many it applied. A session advisory
// lock makes replicas starting at once migrate one after the other.
func migrate(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, now func() time.Time) (int, error) {
	ms, err := store.LoadMigrations(fsys)
	if err != nil {
		return 0, fmt.Errorf("load migrations: %w", err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, 0)", lockMigrations); err != nil {
		return 0, fmt.Errorf("lock the schema: %w", err)
	}
	defer func() {
		// A failed unlock leaves the lock to the session's end; the
		// connection is then not fit for reuse.
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1, 0)", lockMigrations); err != nil {
			conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	const create = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    bigint PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL
	)`
	if _, err := conn.Exec(ctx, create); err != nil {
		return 0, fmt.Errorf("create schema_migrations: %w", err)
	}
	if err := refuseNewer(ctx, conn.Conn(), ms); err != nil {
		return 0, err
	}
	applied := 0
	for _, m := range ms {
		ok, err := applyMigration(ctx, conn.Conn(), m, now())
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
// drop what the newer schema keeps.
func refuseNewer(ctx context.Context, conn *pgx.Conn, known []store.Migration) error {
	newest := 0
	if len(known) > 0 {
		newest = known[len(known)-1].Version
	}
	var version int
	var name string
	err := conn.QueryRow(ctx, "SELECT version, name FROM schema_migrations ORDER BY version DESC LIMIT 1").Scan(&version, &name)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("read the schema's version: %w", err)
	case version > newest:
		return fmt.Errorf("%w: it is at version %d (%s), this cove knows versions up to %d; run the cove that wrote it (or a newer one), or restore the backup taken before the upgrade",
			ErrSchemaNewer, version, name, newest)
	}
	return nil
}

// applyMigration applies m unless it already is.
func applyMigration(ctx context.Context, conn *pgx.Conn, m store.Migration, now time.Time) (bool, error) {
	applied := false
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var done bool
		err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", m.Version).Scan(&done)
		if err != nil || done {
			return err
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
			m.Version, m.Name, now)
		applied = err == nil
		return err
	})
	return applied, err
}
