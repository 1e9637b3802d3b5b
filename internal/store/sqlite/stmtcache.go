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
func (p *pool) stmt(ctx context.Context, query string) *sql.Stmt {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.stmts[query]; ok {
		return s
	}
	if len(p.stmts) >= maxStatements {
		return nil
	}
	s, err := p.DB.PrepareContext(ctx, query)
	if err != nil {
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
