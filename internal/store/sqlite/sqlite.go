// Package sqlite implements store.Store on a SQLite file (modernc.org/sqlite,
// no cgo).
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// busyTimeout is how long a statement waits for another process's lock
// before answering SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// DB is a store.Store on one SQLite file. Writes go through a single
// connection, so writers of this process queue in database/sql instead of
// racing for SQLite's lock; reads use a pool of read-only connections, which
// WAL lets run beside the writer.
type DB struct {
	write   *pool
	read    *pool
	now     func() time.Time
	backlog atomic.Int64 // SetWebhookBacklog; 0 for the default
}

var _ store.Store = (*DB)(nil)

// Open opens (creating if needed) the database at path and applies the
// migrations it lacks.
func Open(ctx context.Context, path string) (*DB, error) {
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("open sqlite: invalid path %q", path)
	}
	if err := ownerOnly(path); err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	pragmas := []string{
		fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()),
		"foreign_keys(1)",
	}
	// WAL with synchronous=NORMAL: a commit survives a crash of the
	// process (kill -9) at once and a crash of the host once the WAL is
	// checkpointed; it costs no fsync per commit.
	write, err := openPool(path, 1, "immediate", append(pragmas, "journal_mode(WAL)", "synchronous(NORMAL)"))
	if err != nil {
		return nil, err
	}
	db := &DB{write: newPool(write), now: time.Now}
	if _, err := migrate(ctx, write, migrations, db.now); err != nil {
		write.Close()
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	// The read pool opens after migrating so that the file is already in
	// WAL mode, which a query_only connection could not switch on.
	read, err := openPool(path, max(4, runtime.GOMAXPROCS(0)), "", append(pragmas, "query_only(1)"))
	if err != nil {
		write.Close()
		return nil, err
	}
	db.read = newPool(read)
	if err := db.read.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return db, nil
}

// ownerOnly makes the database file, and the WAL, shared-memory and
// journal files beside it, readable and writable by their owner only:
// they hold every team's data and API key hashes. The database is created
// here with mode 0600, whatever the umask, and SQLite gives the files it
// creates beside it the database's mode; files an earlier version left
// readable are narrowed.
func ownerOnly(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	err = f.Chmod(0o600)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		if err := os.Chmod(path+suffix, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func openPool(path string, conns int, txlock string, pragmas []string) (*sql.DB, error) {
	q := url.Values{"_pragma": pragmas}
	if txlock != "" {
		q.Set("_txlock", txlock)
	}
	pool, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	pool.SetMaxOpenConns(conns)
	pool.SetMaxIdleConns(conns)
	pool.SetConnMaxLifetime(0)
	pool.SetConnMaxIdleTime(0)
	return pool, nil
}

// Close closes both connection pools.
func (db *DB) Close() error {
	err := db.write.Close()
	if db.read != nil {
		err = errors.Join(err, db.read.Close())
	}
	return err
}

// sqliteCode returns the extended result code of err, or 0 when err is not
// a SQLite error.
func sqliteCode(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// The constraint violations that callers map to coded errors.
const (
	uniqueViolation     = sqlite3.SQLITE_CONSTRAINT_UNIQUE
	primaryKeyViolation = sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	foreignKeyViolation = sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
)

// mustAffect turns an UPDATE that matched no row into notFound.
func mustAffect(res sql.Result, notFound error) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("rows affected: %w", err)
	}
	if n == 0 {
		return notFound
	}
	return nil
}

// versioned checks the result of a compare-and-swap update of what (say
// "sandbox sbx_…"): no row changed means that the row exists at another
// version (CodeConflict: it changed since it was read) or that there is
// none, which exists, a query for it, tells apart.
func (db *DB) versioned(ctx context.Context, res sql.Result, what, exists string, args ...any) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("rows affected: %w", err)
	}
	if n > 0 {
		return nil
	}
	var one int
	err = db.write.QueryRowContext(ctx, exists, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return api.Errorf(api.CodeNotFound, "%s not found", what)
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", what, err)
	}
	return api.Errorf(api.CodeConflict, "%s changed since it was read; retry", what)
}

// timeLayout is RFC 3339 in UTC with a fixed nine fractional digits, so that
// stored times compare correctly as text.
const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// nullTime is the column value of an optional time.
func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return formatTime(*t)
}

func encodeJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", v, err)
	}
	return string(store.CleanJSON(b)), nil
}

// decoder turns column values back into fields, keeping the first error so
// that a scan function can check once at its end.
type decoder struct{ err error }

func (d *decoder) json(s string, v any) {
	if d.err != nil || s == "" {
		return
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		d.err = fmt.Errorf("decode %T: %w", v, err)
	}
}

func (d *decoder) time(s string) time.Time {
	if d.err != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		d.err = fmt.Errorf("parse time: %w", err)
	}
	return t.UTC()
}

func (d *decoder) timePtr(s sql.NullString) *time.Time {
	if !s.Valid {
		return nil
	}
	t := d.time(s.String)
	return &t
}

// emptyIfNil makes a decoded nil map empty: the store never returns nil maps.
func emptyIfNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// withColumns scans a row's columns past those a scan function takes into
// more.
type withColumns struct {
	scanner
	more []any
}

func (w withColumns) Scan(dest ...any) error {
	return w.scanner.Scan(append(dest, w.more...)...)
}

// querier is a pool or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryAll runs a query and scans every row with scan.
func queryAll[T any](ctx context.Context, db querier, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// where collects the conditions and arguments of a list query.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

// in adds "column IN (?, …)" when values is not empty.
func in[S ~string](w *where, column string, values []S) {
	if len(values) == 0 {
		return
	}
	args := make([]any, len(values))
	for i, v := range values {
		args[i] = string(v)
	}
	w.add(column+" IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(values)), ", ")+")", args...)
}

// query finishes a list query: conditions, ordering by id and paging.
func (w *where) query(selectFrom, after string, limit int) (string, []any) {
	if after != "" {
		w.add("id > ?", after)
	}
	q := selectFrom
	if len(w.conds) > 0 {
		q += " WHERE " + strings.Join(w.conds, " AND ")
	}
	q += " ORDER BY id"
	if limit > 0 {
		q += " LIMIT ?"
		w.args = append(w.args, limit)
	}
	return q, w.args
}
