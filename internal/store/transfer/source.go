package transfer

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// source is a consistent copy of the SQLite store being moved, at this
// binary's schema, read through a read-only connection.
type source struct {
	db *sql.DB
	// tables are the store's tables in an order where every table comes
	// after the tables its foreign keys name; columns their columns.
	tables  []string
	columns map[string][]string
	// sequences are the AUTOINCREMENT counters by table: a counter may be
	// past the largest key when the newest rows were deleted, and keys
	// are never to be handed out twice.
	sequences map[string]int64
}

// sqlitePath returns the path of a sqlite:PATH store URL, which must name
// an existing file (the move never makes one).
func sqlitePath(u string) (string, error) {
	p, ok := strings.CutPrefix(u, "sqlite:")
	if !ok || p == "" {
		return "", api.Errorf(api.CodeInvalidArgument, "--from %q: want sqlite:PATH (the cove.db of a cove serve data dir)", u)
	}
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("--from: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", api.Errorf(api.CodeInvalidArgument, "--from: %s is not a file", p)
	}
	return p, nil
}

// openSource copies the SQLite file at path into dir through a read-only
// connection (VACUUM INTO: one consistent snapshot, even of a file in WAL
// mode, and nothing written to the original), brings the copy to this
// binary's schema (refusing a file a newer cove wrote), and opens the
// copy read-only.
func openSource(ctx context.Context, path, dir string) (_ *source, err error) {
	snap := filepath.Join(dir, "snapshot.db")
	if err := sqlite.Snapshot(ctx, path, snap); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	// Opening the copy applies the migrations it lacks, so that its tables
	// are this binary's, as the target's are.
	st, err := sqlite.Open(ctx, snap)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if err := st.Close(); err != nil {
		return nil, err
	}
	db, err := openReadOnly(snap)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	s := &source{db: db, columns: map[string][]string{}, sequences: map[string]int64{}}
	if err := s.readSchema(ctx); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return s, nil
}

// openReadOnly opens a SQLite file with a connection that cannot write
// to it.
func openReadOnly(path string) (*sql.DB, error) {
	q := url.Values{"mode": {"ro"}, "_pragma": {"query_only(1)", "busy_timeout(10000)"}}
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

func (s *source) Close() error { return s.db.Close() }

// readSchema lists the tables, their columns, their foreign keys (to
// order them) and the AUTOINCREMENT counters.
func (s *source) readSchema(ctx context.Context) error {
	names, err := queryStrings(ctx, s.db, `SELECT name FROM sqlite_master
		WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'schema_migrations' ORDER BY name`)
	if err != nil {
		return err
	}
	deps := map[string][]string{}
	for _, t := range names {
		cols, err := queryStrings(ctx, s.db, "SELECT name FROM pragma_table_info(?) ORDER BY cid", t)
		if err != nil {
			return fmt.Errorf("columns of %s: %w", t, err)
		}
		s.columns[t] = cols
		refs, err := queryStrings(ctx, s.db, `SELECT DISTINCT "table" FROM pragma_foreign_key_list(?)`, t)
		if err != nil {
			return fmt.Errorf("foreign keys of %s: %w", t, err)
		}
		deps[t] = refs
	}
	if s.tables, err = dependencyOrder(names, deps); err != nil {
		return err
	}
	var hasSeq bool
	if err := s.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence')").Scan(&hasSeq); err != nil {
		return err
	}
	if !hasSeq {
		return nil
	}
	rows, err := s.db.QueryContext(ctx, "SELECT name, seq FROM sqlite_sequence")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var seq int64
		if err := rows.Scan(&name, &seq); err != nil {
			return err
		}
		s.sequences[name] = seq
	}
	return rows.Err()
}

// dependencyOrder orders tables so that each comes after those it
// references (a table referencing itself is its own concern: its rows
// are copied in one statement, checked at its end).
func dependencyOrder(tables []string, deps map[string][]string) ([]string, error) {
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(t string, path []string) error
	visit = func(t string, path []string) error {
		switch state[t] {
		case 2:
			return nil
		case 1:
			return fmt.Errorf("tables reference each other in a cycle: %s", strings.Join(append(path, t), " → "))
		}
		state[t] = 1
		for _, d := range deps[t] {
			if d == t || !slices.Contains(tables, d) {
				continue
			}
			if err := visit(d, append(path, t)); err != nil {
				return err
			}
		}
		state[t] = 2
		order = append(order, t)
		return nil
	}
	for _, t := range tables {
		if err := visit(t, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// unfinished names the sandboxes that are neither asleep, terminated nor
// failed: a sandbox with a runtime on this host cannot move.
func (s *source) unfinished(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, state FROM sandboxes
		WHERE state NOT IN (?, ?, ?) ORDER BY id`, api.StateAsleep, api.StateTerminated, api.StateFailed)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			return nil, err
		}
		out = append(out, id+" ("+state+")")
	}
	return out, rows.Err()
}

// saved is a save the target must hold: an asleep sandbox's, a setup
// cache entry's, or a snapshot's files.
type saved struct {
	id string
	// sandbox is set for an asleep sandbox (which gets a placement).
	sandbox   bool
	resources string
	// snapshot is set for a snapshot (its files, which sandboxes on it
	// fetch from the save store as a layer).
	snapshot bool
}

// saves lists the saves an asleep sandbox, a setup cache entry or a
// snapshot needs.
func (s *source) saves(ctx context.Context) ([]saved, error) {
	var out []saved
	rows, err := s.db.QueryContext(ctx, "SELECT id, resources FROM sandboxes WHERE state = ? ORDER BY id", api.StateAsleep)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		v := saved{sandbox: true}
		if err := rows.Scan(&v.id, &v.resources); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	caches, err := queryStrings(ctx, s.db, "SELECT DISTINCT save_id FROM setup_cache ORDER BY save_id")
	if err != nil {
		return nil, err
	}
	for _, id := range caches {
		out = append(out, saved{id: id})
	}
	snaps, err := queryStrings(ctx, s.db, "SELECT id FROM snapshots ORDER BY id")
	if err != nil {
		return nil, err
	}
	for _, id := range snaps {
		out = append(out, saved{id: id, snapshot: true})
	}
	return out, nil
}

// placed reports whether the source already records where a sandbox
// is (a store a control plane kept).
func (s *source) placed(ctx context.Context, id string) (bool, error) {
	var ok bool
	err := s.db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM placements WHERE sandbox_id = ?)", id).Scan(&ok)
	return ok, err
}

func queryStrings(ctx context.Context, db *sql.DB, query string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
