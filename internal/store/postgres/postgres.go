// Package postgres implements store.Store on PostgreSQL (pgx), so that
// several control plane replicas can share one database. Its SQL follows
// the sqlite store's statement by statement, with native types: times are
// timestamptz (UTC, to the microsecond), flags boolean, maps and structs
// jsonb. Where SQLite's single writer made a read-then-write one step,
// this store takes a row lock or an advisory lock in a transaction.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cove-dev/cove/internal/store"
)

// defaultMaxConns bounds the pool when the URL does not
// (pool_max_conns=N).
const defaultMaxConns = 16

// DB is a store.Store on a PostgreSQL database, through a connection pool.
type DB struct {
	pool    *pgxpool.Pool
	log     *slog.Logger
	now     func() time.Time
	backlog atomic.Int64 // SetWebhookBacklog; 0 for the default
}

var _ store.Store = (*DB)(nil)

// Open connects to the database at url (postgres://… or postgresql://…)
// and applies the migrations it lacks.
func Open(ctx context.Context, url string, log *slog.Logger) (*DB, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's error names the URL with its password masked.
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	// pgxpool's default (the larger of 4 and the CPUs) starves a control
	// plane whose requests, event streams and background loops all read
	// and write; the URL's pool_max_conns still decides when given.
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns
	}
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		// Times come back in UTC, whatever the session's time zone.
		conn.TypeMap().RegisterType(&pgtype.Type{
			Name: "timestamptz", OID: pgtype.TimestamptzOID,
			Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC},
		})
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to postgres database %s: %w", cfg.ConnConfig.Database, err)
	}
	db := &DB{pool: pool, log: log, now: time.Now}
	if _, err := migrate(ctx, pool, migrations, db.now); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate postgres database %s: %w", cfg.ConnConfig.Database, err)
	}
	return db, nil
}

// Pool is the connection pool, for what works on the database beside the
// store (copying a database into it, LISTEN/NOTIFY).
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Close closes the pool.
func (db *DB) Close() error {
	db.pool.Close()
	return nil
}

// PostgreSQL's SQLSTATEs that callers map to coded errors.
const (
	uniqueViolation     = "23505"
	foreignKeyViolation = "23503"
)

// violation classifies a failed write: "primary" (a row with that key
// exists), "unique" (another unique index), "foreign" (a row it refers
// to is missing), or "".
func violation(err error) string {
	var e *pgconn.PgError
	if !errors.As(err, &e) {
		return ""
	}
	switch e.Code {
	case uniqueViolation:
		if strings.HasSuffix(e.ConstraintName, "_pkey") {
			return "primary"
		}
		return "unique"
	case foreignKeyViolation:
		return "foreign"
	}
	return ""
}

// mustAffect turns a write that matched no row into notFound.
func mustAffect(tag pgconn.CommandTag, notFound error) error {
	if tag.RowsAffected() == 0 {
		return notFound
	}
	return nil
}

// utc makes t UTC, to the microsecond PostgreSQL keeps.
func utc(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func encodeJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", v, err)
	}
	return string(store.CleanJSON(b)), nil
}

// decoder turns jsonb column values back into fields, keeping the first
// error so that a scan function can check once at its end.
type decoder struct{ err error }

func (d *decoder) json(s string, v any) {
	if d.err != nil || s == "" {
		return
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		d.err = fmt.Errorf("decode %T: %w", v, err)
	}
}

// emptyIfNil makes a decoded nil map empty: the store never returns nil maps.
func emptyIfNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// scanner is a pgx.Row or pgx.Rows.
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

// querier is the pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// queryAll runs a query and scans every row with scan.
func queryAll[T any](ctx context.Context, q querier, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, query, args...)
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

// where collects the conditions and arguments of a list query. Conditions
// are written with ? for their arguments, numbered $n as they are added.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	var b strings.Builder
	for i, part := range strings.Split(cond, "?") {
		if i > 0 {
			b.WriteString("$" + strconv.Itoa(len(w.args)+i))
		}
		b.WriteString(part)
	}
	w.conds = append(w.conds, b.String())
	w.args = append(w.args, args...)
}

// in adds "column = ANY(?)" when values is not empty.
func in[S ~string](w *where, column string, values []S) {
	if len(values) == 0 {
		return
	}
	list := make([]string, len(values))
	for i, v := range values {
		list[i] = string(v)
	}
	w.add(column+" = ANY(?)", list)
}

// limit appends a LIMIT clause to q when n > 0.
func (w *where) limit(q string, n int) string {
	if n <= 0 {
		return q
	}
	w.args = append(w.args, n)
	return q + " LIMIT $" + strconv.Itoa(len(w.args))
}

// clause is " WHERE …" of the conditions, or "".
func (w *where) clause() string {
	if len(w.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(w.conds, " AND ")
}

// query finishes a list query: conditions, ordering by id and paging.
func (w *where) query(selectFrom, after string, limit int) (string, []any) {
	if after != "" {
		w.add("id > ?", after)
	}
	return w.limit(selectFrom+w.clause()+" ORDER BY id", limit), w.args
}

// inTx runs fn in a transaction, committed when fn returns nil.
func (db *DB) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db.pool, fn)
}

// Advisory lock keys (first half of pg_advisory_xact_lock's pair): writes
// that SQLite's single writer serialized are serialized by these.
const (
	lockEvents       = 1 // appends to a team's event log (second key: its ID's hash), so that seq commits in order
	lockIDRanges     = 2 // id range allocation
	lockObservations = 3 // a sandbox's observation rows (second key: its ID's hash)
	lockMigrations   = 4 // schema migrations
)
