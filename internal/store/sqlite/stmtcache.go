package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// maxStatements bounds the prepared statements a pool keeps: list queries
// built from filters have as many texts as their combinations of
// conditions, and a text past the bound is prepared at each call, as
// database/sql does without a cache.
const maxStatements = 512

// pool is a connection pool that prepares each query text once and keeps
// the statement: SQLite parses and plans a statement at each prepare, which
// is most of the cost of a short query (a command's round trip makes about
// ten). database/sql prepares a kept statement again on each connection
// that runs it, and gives each connection's statement to one caller at a
// time. Transactions (BeginTx) prepare their statements as before.
type pool struct {
	*sql.DB
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

func newPool(db *sql.DB) *pool { return &pool{DB: db, stmts: map[string]*sql.Stmt{}} }

// stmt returns the kept statement of query, preparing it the first time;
// nil when the pool keeps maxStatements already (or the prepare failed:
// the caller's own call then reports the error).
func (p *pool) stmt(ctx context.Context, query string) *sql.Stmt { return p.stmtOf(ctx, query, true) }

// prepare keeps the statements of queries, for a transaction to come
// (one cannot prepare on the pool while it holds the pool's connection).
func (p *pool) prepare(ctx context.Context, queries ...string) {
	for _, q := range queries {
		p.stmtOf(ctx, q, true)
	}
}

func (p *pool) stmtOf(ctx context.Context, query string, prepare bool) *sql.Stmt {
	p.mu.Lock()
	s, ok := p.stmts[query]
	full := len(p.stmts) >= maxStatements
	p.mu.Unlock()
	if ok || !prepare || full {
		return s
	}
	// Prepared without the lock: a prepare waits for a connection, which
	// a transaction may hold while it looks up its kept statements.
	s, err := p.DB.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if kept, ok := p.stmts[query]; ok {
		s.Close() // another caller kept the same text meanwhile
		return kept
	}
	if len(p.stmts) >= maxStatements {
		s.Close()
		return nil
	}
	p.stmts[query] = s
	return s
}

func (p *pool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := p.stmt(ctx, query); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return p.DB.QueryContext(ctx, query, args...)
}

func (p *pool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := p.stmt(ctx, query); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return p.DB.QueryRowContext(ctx, query, args...)
}

func (p *pool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := p.stmt(ctx, query); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return p.DB.ExecContext(ctx, query, args...)
}

// Close closes the kept statements, then the pool's connections.
func (p *pool) Close() error {
	p.mu.Lock()
	var err error
	for q, s := range p.stmts {
		err = errors.Join(err, s.Close())
		delete(p.stmts, q)
	}
	p.mu.Unlock()
	return errors.Join(err, p.DB.Close())
}

// txQuerier is a transaction, or one that runs the pool's kept statements.
type txQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// keptTx runs a transaction of the pool with the statements the pool
// keeps already (see prepare; it prepares none itself: the transaction
// holds a connection the pool may need to prepare). A text must not run
// again while its rows are open in the same transaction (the two would
// share one SQLite statement): keptTx is for the hot path's transactions.
type keptTx struct {
	*sql.Tx
	p *pool
}

func (p *pool) kept(tx *sql.Tx) keptTx { return keptTx{Tx: tx, p: p} }

func (t keptTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := t.p.stmtOf(ctx, query, false); s != nil {
		return t.Tx.StmtContext(ctx, s).QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, query, args...)
}

func (t keptTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := t.p.stmtOf(ctx, query, false); s != nil {
		return t.Tx.StmtContext(ctx, s).QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}

func (t keptTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := t.p.stmtOf(ctx, query, false); s != nil {
		return t.Tx.StmtContext(ctx, s).ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, query, args...)
}
