package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/storetest"
)

func openTest(t *testing.T, path string) *DB {
	t.Helper()
	db, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openTest(t, filepath.Join(t.TempDir(), "cove.db"))
	})
}

func TestOpenMigratesOnce(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "cove.db")
	ms, err := store.LoadMigrations(migrations)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Version != 1 {
		t.Fatalf("migrations = %+v; want the first to be version 1", ms)
	}

	first := openTest(t, path)
	team := api.Team{ID: "team_a", Name: "alpha", CreatedAt: time.Now()}
	if err := first.CreateTeam(ctx, team); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	second := openTest(t, path)
	if n, err := migrate(ctx, second.write.DB, migrations, time.Now); err != nil || n != 0 {
		t.Errorf("migrate after Open applied %d, %v; want 0, nil", n, err)
	}
	var versions int
	if err := second.read.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations").Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != len(ms) {
		t.Errorf("schema_migrations has %d rows; want %d", versions, len(ms))
	}
	if _, err := second.GetTeam(ctx, team.ID); err != nil {
		t.Errorf("team lost across Open: %v", err)
	}
}

// TestRefusesNewerSchema: a binary that knows fewer migrations than the
// database has applied (a downgrade) refuses to open it, naming both
// versions, and changes nothing.
func TestRefusesNewerSchema(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "cove.db")
	db := openTest(t, path)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ms, err := store.LoadMigrations(migrations)
	if err != nil {
		t.Fatal(err)
	}
	// An older binary: every migration but the newest.
	older := fstest.MapFS{}
	for _, m := range ms[:len(ms)-1] {
		older["migrations/"+m.Name] = &fstest.MapFile{Data: []byte(m.SQL)}
	}
	pool, err := openPool(path, 1, "immediate", []string{"foreign_keys(1)"})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	newest := ms[len(ms)-1]
	_, err = migrate(ctx, pool, older, time.Now)
	if !errors.Is(err, ErrSchemaNewer) {
		t.Fatalf("an older binary's migrate: %v, want ErrSchemaNewer", err)
	}
	for _, want := range []string{fmt.Sprintf("version %d (%s)", newest.Version, newest.Name), fmt.Sprintf("up to %d", ms[len(ms)-2].Version)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	var n int
	if err := pool.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations").Scan(&n); err != nil || n != len(ms) {
		t.Errorf("schema_migrations has %d rows (%v), want %d", n, err, len(ms))
	}
	// The binary that wrote it opens it as before.
	if n, err := migrate(ctx, pool, migrations, time.Now); err != nil || n != 0 {
		t.Errorf("migrate with every migration: %d, %v; want 0, nil", n, err)
	}
}

// TestConcurrentWriters writes from many goroutines through two handles on
// one file, as two processes would, and expects no SQLITE_BUSY.
func TestConcurrentWriters(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "cove.db")
	dbs := []*DB{openTest(t, path), openTest(t, path)}
	if err := dbs[0].CreateTeam(ctx, api.Team{ID: "team_a", Name: "alpha", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}

	const writers = 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			db := dbs[i%len(dbs)]
			sb := api.Sandbox{
				ID: fmt.Sprintf("sbx_%02d", i), TeamID: "team_a", Name: fmt.Sprintf("sb-%d", i),
				State: api.StateCreating, CreatedAt: time.Now(),
			}
			if err := db.CreateSandbox(ctx, sb); err != nil {
				errs <- err
				return
			}
			sb.State, sb.Version = api.StateRunning, 1
			if err := db.UpdateSandbox(ctx, sb); err != nil {
				errs <- err
				return
			}
			errs <- db.CreateCommand(ctx, api.Command{
				ID: "cmd_" + sb.ID, SandboxID: sb.ID, State: api.CommandRunning, StartedAt: time.Now(),
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("write (sqlite code %d): %v", sqliteCode(err), err)
		}
	}
	got, err := dbs[1].ListSandboxes(ctx, store.SandboxFilter{States: []api.SandboxState{api.StateRunning}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != writers {
		t.Errorf("%d running sandboxes; want %d", len(got), writers)
	}
}

// TestFilesOwnerOnly: the database and the WAL and shared-memory files
// SQLite makes beside it are 0600, also when an earlier start left them
// readable by others.
func TestFilesOwnerOnly(t *testing.T) {
	for _, tt := range []struct {
		name     string
		existing bool
	}{{"new", false}, {"left readable", true}} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cove.db")
			if tt.existing {
				for _, p := range []string{path, path + "-wal"} {
					if err := os.WriteFile(p, nil, 0o644); err != nil {
						t.Fatal(err)
					}
					if err := os.Chmod(p, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			db := openTest(t, path)
			if err := db.CreateTeam(t.Context(), api.Team{ID: "team_a", Name: "alpha", CreatedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				st, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if st.Mode().Perm() != 0o600 {
					t.Errorf("%s: mode %v, want 0600", filepath.Base(p), st.Mode().Perm())
				}
			}
		})
	}
}

// TestFullDatabaseIsDiskFull: a write the database file has no room for
// (SQLite's SQLITE_FULL; here from a page cap, on a node from its full
// data disk) is told apart from other failures by store.DiskFull, so the
// API answers it with a code rather than as internal.
func TestFullDatabaseIsDiskFull(t *testing.T) {
	ctx := t.Context()
	db := openTest(t, filepath.Join(t.TempDir(), "cove.db"))
	if err := db.CreateTeam(ctx, api.Team{ID: "team_a", Name: "alpha", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var pages int
	if err := db.write.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := db.write.ExecContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", pages)); err != nil {
		t.Fatal(err)
	}
	var err error
	for i := 0; i < 10000 && err == nil; i++ {
		_, _, err = db.ClaimIdempotent(ctx, store.IdempotencyClaim{
			TeamID: "team_a", Key: fmt.Sprintf("key-%d-%s", i, strings.Repeat("x", 200)),
			RequestHash: "h", Owner: "rep", ClaimedAt: time.Now(),
		})
	}
	if err == nil || !store.DiskFull(err) {
		t.Fatalf("claims into a database that cannot grow: %v; want an error store.DiskFull reports", err)
	}
	if store.Unavailable(err) {
		t.Fatalf("a full database reported as unavailable: %v", err)
	}
}
