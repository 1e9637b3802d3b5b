package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/storetest"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

func TestMain(m *testing.M) { pgserver.Main(m) }

func openTest(t *testing.T, url string) *DB {
	t.Helper()
	db, err := Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestStore(t *testing.T) {
	srv := pgserver.Start(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		return openTest(t, srv.NewDatabase(t))
	})
}

func TestOpenMigratesOnce(t *testing.T) {
	ctx := t.Context()
	url := pgserver.Start(t).NewDatabase(t)
	ms, err := store.LoadMigrations(migrations)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Version != 1 {
		t.Fatalf("migrations = %+v; want the first to be version 1", ms)
	}

	first := openTest(t, url)
	team := api.Team{ID: "team_a", Name: "alpha", CreatedAt: time.Now()}
	if err := first.CreateTeam(ctx, team); err != nil {
		t.Fatal(err)
	}
	first.Close()

	second := openTest(t, url)
	if n, err := migrate(ctx, second.pool, migrations, time.Now); err != nil || n != 0 {
		t.Errorf("migrate after Open applied %d, %v; want 0, nil", n, err)
	}
	var versions int
	if err := second.pool.QueryRow(ctx, "SELECT count(*) FROM schema_migrations").Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != len(ms) {
		t.Errorf("schema_migrations has %d rows; want %d", versions, len(ms))
	}
	if _, err := second.GetTeam(ctx, team.ID); err != nil {
		t.Errorf("team lost across Open: %v", err)
	}
}

// TestOpenConcurrently: replicas opening one new database at once migrate
// it once, and all open it.
func TestOpenConcurrently(t *testing.T) {
	url := pgserver.Start(t).NewDatabase(t)
	const n = 4
	errs := make(chan error, n)
	for range n {
		go func() {
			db, err := Open(t.Context(), url, nil)
			if err == nil {
				db.Close()
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestRefusesNewerSchema: a binary that knows fewer migrations than the
// database has applied (a downgrade) refuses to open it, naming both
// versions, and changes nothing.
func TestRefusesNewerSchema(t *testing.T) {
	ctx := t.Context()
	url := pgserver.Start(t).NewDatabase(t)
	db := openTest(t, url)
	ms, err := store.LoadMigrations(migrations)
	if err != nil {
		t.Fatal(err)
	}
	// The binary that wrote the database knows one migration more than
	// this (older) one.
	newer := fstest.MapFS{}
	for _, m := range ms {
		newer["migrations/"+m.Name] = &fstest.MapFile{Data: []byte(m.SQL)}
	}
	next := store.Migration{Version: ms[len(ms)-1].Version + 1, Name: fmt.Sprintf("%04d_next.sql", ms[len(ms)-1].Version+1)}
	newer["migrations/"+next.Name] = &fstest.MapFile{Data: []byte("CREATE TABLE next_thing (id bigint)")}
	if n, err := migrate(ctx, db.pool, newer, time.Now); err != nil || n != 1 {
		t.Fatalf("the newer binary's migrate: %d, %v; want 1, nil", n, err)
	}

	_, err = Open(ctx, url, nil)
	if !errors.Is(err, ErrSchemaNewer) {
		t.Fatalf("Open by an older binary: %v, want ErrSchemaNewer", err)
	}
	for _, want := range []string{fmt.Sprintf("version %d (%s)", next.Version, next.Name), fmt.Sprintf("up to %d", ms[len(ms)-1].Version)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	var n int
	if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM schema_migrations").Scan(&n); err != nil || n != len(ms)+1 {
		t.Errorf("schema_migrations has %d rows (%v), want %d", n, err, len(ms)+1)
	}
	// The binary that wrote it opens it as before.
	if n, err := migrate(ctx, db.pool, newer, time.Now); err != nil || n != 0 {
		t.Errorf("migrate with every migration: %d, %v; want 0, nil", n, err)
	}
}

// TestEventCursorSkipsNothing: events appended at once through two
// handles (two replicas) reach a reader that follows the log by cursor,
// every one of them: no event commits behind a later ID the reader has
// already passed.
func TestEventCursorSkipsNothing(t *testing.T) {
	ctx := t.Context()
	url := pgserver.Start(t).NewDatabase(t)
	dbs := []*DB{openTest(t, url), openTest(t, url)}
	if err := dbs[0].CreateTeam(ctx, api.Team{ID: "team_a", Name: "alpha", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 40
	errs := make(chan error, writers)
	for i := range writers {
		go func() {
			db := dbs[i%len(dbs)]
			for j := range each {
				if _, err := db.AppendEvent(ctx, "team_a", api.Event{Type: "test", Time: time.Now(), Data: map[string]any{"w": i, "n": j}}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	seen := map[string]bool{}
	cursor := ""
	done := 0
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		// Writers that had returned before this read had committed
		// every event of theirs: a read that finds nothing new once all
		// had is the log's end.
		allDone := done == writers
		evs, err := dbs[1].ListEvents(ctx, store.EventFilter{TeamID: "team_a", After: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if seen[e.ID] {
				t.Fatalf("event %s read twice", e.ID)
			}
			seen[e.ID] = true
			cursor = e.ID
		}
		if allDone && len(evs) == 0 {
			break
		}
	drain:
		for done < writers {
			select {
			case err := <-errs:
				if err != nil {
					t.Fatal(err)
				}
				done++
			default:
				break drain
			}
		}
	}
	if len(seen) != writers*each {
		t.Errorf("the reader saw %d events of %d", len(seen), writers*each)
	}
}

// TestListenNotify: a notification through one handle reaches a listener
// on another; the listener also fires when it starts listening, and
// listens again after the database restarts.
func TestListenNotify(t *testing.T) {
	srv := pgserver.Start(t)
	url := srv.NewDatabase(t)
	a, b := openTest(t, url), openTest(t, url)

	ctx, cancel := context.WithCancel(t.Context())
	calls := make(chan struct{}, 100)
	var wg sync.WaitGroup
	wg.Go(func() {
		a.Listen(ctx, "cove_test", func() { calls <- struct{}{} })
	})
	defer wg.Wait()
	defer cancel()

	waitCall := func(what string) {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(30 * time.Second):
			t.Fatalf("no call %s", what)
		}
	}
	notify := func() {
		t.Helper()
		// The pool's connections from before a restart are broken:
		// try again until a fresh one answers.
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := b.Notify(t.Context(), "cove_test")
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	drain := func() {
		for {
			select {
			case <-calls:
			default:
				return
			}
		}
	}

	waitCall("once listening")
	notify()
	waitCall("on a notification")
	if err := b.Notify(t.Context(), "other_channel"); err != nil {
		t.Fatal(err)
	}
	notify()
	waitCall("on the second notification")
	// Notifications arrive in the order they were sent: one on the
	// other channel that called fn would have done so before.
	if len(calls) != 0 {
		t.Error("a notification on another channel called fn")
	}

	srv.Restart(t)
	waitCall("once listening again after a restart")
	drain()
	notify()
	waitCall("on a notification after a restart")
}

// TestPoolSize: the pool holds 16 connections unless the URL says
// otherwise.
func TestPoolSize(t *testing.T) {
	url := pgserver.Start(t).NewDatabase(t)
	for _, tt := range []struct {
		url  string
		want int32
	}{
		{url, defaultMaxConns},
		{url + "&pool_max_conns=3", 3},
	} {
		db := openTest(t, tt.url)
		if got := db.Pool().Config().MaxConns; got != tt.want {
			t.Errorf("%s: MaxConns %d, want %d", tt.url, got, tt.want)
		}
	}
}
