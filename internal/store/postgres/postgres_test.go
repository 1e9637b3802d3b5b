package postgres

import (
	"errors"
	"fmt"
	"strings"
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
	ms, err := loadMigrations(migrations)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].version != 1 {
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
	ms, err := loadMigrations(migrations)
	if err != nil {
		t.Fatal(err)
	}
	// The binary that wrote the database knows one migration more than
	// this (older) one.
	newer := fstest.MapFS{}
	for _, m := range ms {
		newer["migrations/"+m.name] = &fstest.MapFile{Data: []byte(m.sql)}
	}
	next := migration{version: ms[len(ms)-1].version + 1, name: fmt.Sprintf("%04d_next.sql", ms[len(ms)-1].version+1)}
	newer["migrations/"+next.name] = &fstest.MapFile{Data: []byte("CREATE TABLE next_thing (id bigint)")}
	if n, err := migrate(ctx, db.pool, newer, time.Now); err != nil || n != 1 {
		t.Fatalf("the newer binary's migrate: %d, %v; want 1, nil", n, err)
	}

	_, err = Open(ctx, url, nil)
	if !errors.Is(err, ErrSchemaNewer) {
		t.Fatalf("Open by an older binary: %v, want ErrSchemaNewer", err)
	}
	for _, want := range []string{fmt.Sprintf("version %d (%s)", next.version, next.name), fmt.Sprintf("up to %d", ms[len(ms)-1].version)} {
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
	for len(seen) < writers*each && time.Now().Before(deadline) {
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
		for done < writers {
			select {
			case err := <-errs:
				if err != nil {
					t.Fatal(err)
				}
				done++
				continue
			default:
			}
			break
		}
		if done == writers && len(evs) == 0 {
			break // every writer is done and the log is read to its end
		}
	}
	if len(seen) != writers*each {
		t.Errorf("the reader saw %d events of %d", len(seen), writers*each)
	}
}
