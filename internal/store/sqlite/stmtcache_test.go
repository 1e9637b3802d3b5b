package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestKeptStatements checks the pools' kept statements: one text runs
// from two goroutines at once, each with its rows open across its own
// query of the same text (on another connection: the read pool has four); texts past the bound still run; the statements
// are kept only up to the bound; and the pools close with them.
func TestKeptStatements(t *testing.T) {
	db := openTest(t, filepath.Join(t.TempDir(), "cove.db"))
	ctx := t.Context()
	if _, err := db.write.ExecContext(ctx, "CREATE TABLE kept (n INTEGER PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	for n := range 10 {
		if _, err := db.write.ExecContext(ctx, "INSERT INTO kept (n) VALUES (?)", n); err != nil {
			t.Fatal(err)
		}
	}
	const q = "SELECT n FROM kept WHERE n >= ? ORDER BY n"
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for g := range 20 {
		if g%2 == 0 {
			wg.Wait()
		}
		wg.Go(func() {
			from := g % 10
			rows, err := db.read.QueryContext(ctx, q, from)
			if err != nil {
				errs <- err
				return
			}
			defer rows.Close()
			want := from
			for rows.Next() {
				var n int
				if err := rows.Scan(&n); err != nil {
					errs <- err
					return
				}
				// Another query of the same text while these rows are open.
				var first int
				if err := db.read.QueryRowContext(ctx, q, n).Scan(&first); err != nil {
					errs <- err
					return
				}
				if n != want || first != n {
					errs <- fmt.Errorf("from %d: row %d (inner first %d), want %d", from, n, first, want)
					return
				}
				want++
			}
			if err := rows.Err(); err != nil {
				errs <- err
			} else if want != 10 {
				errs <- fmt.Errorf("from %d: rows ended at %d", from, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range maxStatements + 10 {
		var n int
		if err := db.read.QueryRowContext(ctx, fmt.Sprintf("SELECT count(*) + %d FROM kept", i)).Scan(&n); err != nil || n != 10+i {
			t.Fatalf("text %d: %d, %v", i, n, err)
		}
	}
	db.read.mu.Lock()
	kept := len(db.read.stmts)
	db.read.mu.Unlock()
	if kept != maxStatements {
		t.Errorf("the read pool keeps %d statements, want %d", kept, maxStatements)
	}
	if _, err := db.read.QueryContext(ctx, "SELECT nothing FROM nowhere"); err == nil {
		t.Error("a query of a missing table succeeded")
	}
	if err := db.Close(); err != nil {
		t.Fatalf("close with kept statements: %v", err)
	}
}

// TestKeptStatementWhileTxHoldsWriter: a caller preparing a new text on
// the write pool waits for its one connection, which a transaction holds;
// the transaction still runs its statements (looking up the kept ones
// must not wait for that prepare) and commits, and then the caller runs.
func TestKeptStatementWhileTxHoldsWriter(t *testing.T) {
	db := openTest(t, filepath.Join(t.TempDir(), "cove.db"))
	ctx := t.Context()
	if _, err := db.write.ExecContext(ctx, "CREATE TABLE kept (n INTEGER PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	waits := db.write.DB.Stats().WaitCount
	done := make(chan error, 1)
	go func() {
		// Bounded, so that a deadlock fails the test instead of hanging it.
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := db.write.ExecContext(actx, "INSERT INTO kept (n) VALUES (?)", 2)
		done <- err
	}()
	// The caller is waiting for the connection (in its prepare).
	for db.write.DB.Stats().WaitCount == waits {
		runtime.Gosched()
	}
	if _, err := db.write.kept(tx).ExecContext(ctx, "INSERT INTO kept (n) VALUES (?)", 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the caller waiting for the writer: %v", err)
	}
	var n int
	if err := db.read.QueryRowContext(ctx, "SELECT count(*) FROM kept").Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows, %v; want 2", n, err)
	}
}
