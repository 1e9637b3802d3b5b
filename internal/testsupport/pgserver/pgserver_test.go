package pgserver

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

// tb records whether Start failed or skipped.
type tb struct {
	testing.TB
	failed, skipped bool
}

func (r *tb) Helper()               {}
func (r *tb) Fatal(...any)          { r.failed = true; runtime.Goexit() }
func (r *tb) Skip(...any)           { r.skipped = true; runtime.Goexit() }
func (r *tb) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }

// TestMissingBinaries: without PostgreSQL a test is skipped, and fails
// when COVE_REQUIRE_PG=1.
func TestMissingBinaries(t *testing.T) {
	t.Setenv("COVE_PGBIN", "/nonexistent/bin")
	for _, require := range []string{"", "1"} {
		t.Setenv("COVE_REQUIRE_PG", require)
		r := &tb{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Start(r)
		}()
		<-done
		if want := require == "1"; r.failed != want || r.skipped == want {
			t.Errorf("COVE_REQUIRE_PG=%q: failed %v, skipped %v", require, r.failed, r.skipped)
		}
	}
}

// TestDatabases: each test gets its own empty database, dropped when the
// test ends; the cluster outlives a restart with its data.
func TestDatabases(t *testing.T) {
	s := Start(t)
	if again := Start(t); again != s {
		t.Fatal("a second Start started a second cluster")
	}
	var a, b string
	t.Run("a", func(t *testing.T) {
		a = s.NewDatabase(t)
		b = s.NewDatabase(t)
		if a == b {
			t.Fatalf("two databases at one URL %s", a)
		}
		execSQL(t, a, "CREATE TABLE kept (v text)")
		execSQL(t, a, "INSERT INTO kept VALUES ('x')")
		if n := count(t, b, "SELECT count(*) FROM pg_tables WHERE tablename = 'kept'"); n != 0 {
			t.Errorf("database b sees a's table")
		}
		s.Restart(t)
		if n := count(t, a, "SELECT count(*) FROM kept"); n != 1 {
			t.Errorf("after a restart the table holds %d rows, want 1", n)
		}
	})
	if n := count(t, s.URL(), "SELECT count(*) FROM pg_database WHERE datname LIKE 't_testdatabases_a_%'"); n != 0 {
		t.Errorf("%d databases of the ended test are left", n)
	}
}

func execSQL(t *testing.T, url, sql string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, url, sql string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	var n int
	if err := conn.QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSweep: a cluster directory whose postmaster is gone is removed once
// stale; a fresh one, or one with a live postmaster, is kept.
func TestSweep(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	now := time.Now()
	mk := func(name string, pid int, age time.Duration) string {
		dir := filepath.Join(os.TempDir(), dirPrefix+name)
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if pid != 0 {
			pidFile := filepath.Join(dir, "data", "postmaster.pid")
			if err := os.WriteFile(pidFile, []byte(strconv.Itoa(pid)+"\n/data\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(dir, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dead := mk("dead", 0, time.Hour)
	fresh := mk("fresh", 0, time.Minute)
	live := mk("live", os.Getpid(), time.Hour)
	sweep(now)
	for dir, want := range map[string]bool{dead: false, fresh: true, live: true} {
		_, err := os.Stat(dir)
		if got := err == nil; got != want {
			t.Errorf("%s kept %v, want %v", filepath.Base(dir), got, want)
		}
	}
}
