package transfer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

func TestConvert(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)
	cases := []struct {
		name    string
		col     column
		in      any
		want    any
		wantErr string
	}{
		{"null", column{dataType: "timestamp with time zone"}, nil, nil, ""},
		{"time", column{dataType: "timestamp with time zone"}, "2026-03-04T05:06:07.123456789Z", at, ""},
		{"time as bytes", column{dataType: "timestamp with time zone"}, []byte("2026-03-04T05:06:07.123456789Z"), at, ""},
		{"bad time", column{dataType: "timestamp with time zone"}, "yesterday", nil, "a time"},
		{"int as time", column{dataType: "timestamp with time zone"}, int64(5), nil, "stored as int64"},
		{"true", column{dataType: "boolean"}, int64(1), true, ""},
		{"false", column{dataType: "boolean"}, int64(0), false, ""},
		{"text as boolean", column{dataType: "boolean"}, "yes", nil, "a boolean"},
		{"jsonb", column{dataType: "jsonb"}, `{"a":1}`, json.RawMessage(`{"a":1}`), ""},
		{"bad jsonb", column{dataType: "jsonb"}, `{"a":`, nil, "not JSON"},
		{"NUL in jsonb", column{dataType: "jsonb"}, `{"a":"x\u0000y"}`, nil, "NUL"},
		{"escaped backslash before u0000", column{dataType: "jsonb"}, `{"a":"\\u0000"}`, json.RawMessage(`{"a":"\\u0000"}`), ""},
		{"NUL in text", column{dataType: "text"}, "a\x00b", nil, "NUL"},
		{"text not UTF-8", column{dataType: "text"}, "a\xffb", nil, "UTF-8"},
		{"bytea", column{dataType: "bytea"}, []byte{0, 1, 2}, []byte{0, 1, 2}, ""},
		{"bigint", column{dataType: "bigint"}, int64(7), int64(7), ""},
		{"integral real as bigint", column{dataType: "bigint"}, float64(7), int64(7), ""},
		{"fraction as bigint", column{dataType: "bigint"}, 7.5, nil, "an integer"},
		{"float", column{dataType: "double precision"}, 0.25, 0.25, ""},
		{"int as float", column{dataType: "double precision"}, int64(2), float64(2), ""},
		{"text", column{dataType: "text"}, "hi", "hi", ""},
		{"int in text", column{dataType: "text"}, int64(12), "12", ""},
		{"text list", column{dataType: "ARRAY", udt: "_text"}, `["a","b"]`, []string{"a", "b"}, ""},
		{"empty list", column{dataType: "ARRAY", udt: "_text"}, `null`, []string{}, ""},
		{"unknown type", column{dataType: "point", udt: "point"}, "(1,2)", nil, "no conversion"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := convert(c.col, c.in)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("convert(%v) = %v, %v; want an error with %q", c.in, got, err, c.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("convert(%v) = %#v, %v; want %#v", c.in, got, err, c.want)
			}
		})
	}
}

func TestDependencyOrder(t *testing.T) {
	order, err := dependencyOrder(
		[]string{"commands", "events", "sandboxes", "teams", "tree"},
		map[string][]string{
			"commands": {"sandboxes"}, "events": {"teams"}, "sandboxes": {"teams"},
			"tree": {"tree"}, // a table referencing itself
		})
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, t := range order {
		pos[t] = i
	}
	if len(order) != 5 || pos["teams"] > pos["sandboxes"] || pos["sandboxes"] > pos["commands"] || pos["teams"] > pos["events"] {
		t.Fatalf("order %v puts a table before one it references", order)
	}
	if _, err := dependencyOrder([]string{"a", "b"}, map[string][]string{"a": {"b"}, "b": {"a"}}); err == nil {
		t.Fatal("a cycle was ordered")
	}
}

// serveStore makes the store of a cove serve data dir with one team and
// a sandbox in each of the given states, and returns its path.
func serveStore(t *testing.T, states ...api.SandboxState) string {
	t.Helper()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "cove.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	if err := st.CreateTeam(ctx, api.Team{ID: "team_1", Name: "one", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		sb := api.Sandbox{ID: "sbx_" + string(s), TeamID: "team_1", State: s, CreatedAt: now,
			Resources: api.Resources{CPUs: 1, MemoryMiB: 256, DiskMiB: 1024}}
		if err := st.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// dirSums maps every file under dir to its sha-256.
func dirSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		io.Copy(h, f)
		sums[path] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	return sums
}

// TestRefusesBusySandboxes: while a sandbox is running or sleeping the
// move names it and writes nothing: not the target (never opened), not
// the source's files (byte for byte), not a saves directory.
func TestRefusesBusySandboxes(t *testing.T) {
	path := serveStore(t, api.StateRunning, api.StateSleeping, api.StateAsleep, api.StateTerminated, api.StateFailed)
	dir := filepath.Dir(path)
	before := dirSums(t, dir)
	_, err := Run(t.Context(), Config{
		// No database listens there: a refusal that names the sandboxes
		// came before any attempt to reach it.
		From: "sqlite:" + path, To: "postgres://127.0.0.1:1/none", Saves: "s3://bucket/prefix",
	})
	if api.ErrorCode(err) != api.CodePreconditionFailed {
		t.Fatalf("Run = %v; want precondition_failed", err)
	}
	msg := err.Error()
	for _, want := range []string{"sbx_running (running)", "sbx_sleeping (sleeping)", "nothing was written"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal %q does not say %q", msg, want)
		}
	}
	for _, quiet := range []string{"sbx_asleep", "sbx_terminated", "sbx_failed"} {
		if strings.Contains(msg, quiet) {
			t.Errorf("the refusal %q names %s, which may move", msg, quiet)
		}
	}
	after := dirSums(t, dir)
	for p, sum := range before {
		if after[p] != sum {
			t.Errorf("%s changed", p)
		}
	}
	for p := range after {
		// A reader of a database in WAL mode may make its (empty) WAL
		// and shared-memory index: SQLite's, not the database's content.
		if _, ok := before[p]; !ok && !strings.HasSuffix(p, "-shm") && !strings.HasSuffix(p, "-wal") {
			t.Errorf("%s appeared in the source's data dir", p)
		}
	}
}

// TestSourceSnapshot: the snapshot lists the store's tables (those a
// foreign key names first) and their rows, whatever the source's mode.
func TestSourceSnapshot(t *testing.T) {
	path := serveStore(t, api.StateAsleep)
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	s, err := openSource(t.Context(), path, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pos := map[string]int{}
	for i, tb := range s.tables {
		pos[tb] = i
	}
	for _, tb := range []string{"teams", "sandboxes", "commands", "events", "secrets", "placements"} {
		if _, ok := pos[tb]; !ok {
			t.Errorf("table %s is not listed: %v", tb, s.tables)
		}
	}
	if _, ok := pos["schema_migrations"]; ok {
		t.Error("schema_migrations is copied: the target's own migrations write it")
	}
	if pos["teams"] > pos["sandboxes"] || pos["sandboxes"] > pos["commands"] {
		t.Errorf("order %v", s.tables)
	}
	want, err := s.saves(t.Context())
	if err != nil || len(want) != 1 || want[0].id != "sbx_asleep" || !want[0].sandbox {
		t.Fatalf("saves = %+v, %v; want the asleep sandbox's", want, err)
	}
	var res api.Resources
	if err := json.Unmarshal([]byte(want[0].resources), &res); err != nil || res.MemoryMiB != 256 {
		t.Fatalf("resources %q: %v", want[0].resources, err)
	}
}
