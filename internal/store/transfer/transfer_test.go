package transfer

import (
	"archive/tar"
	"bytes"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/saves"
	"github.com/cove-dev/cove/internal/sources"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

func TestMain(m *testing.M) { pgserver.Main(m) }

// install is a cove serve data dir made through the SQLite store: a
// team with a key and a sealed secret, an asleep sandbox with a save
// and a command, a terminated one, events (the newest deleted, so that
// the counter is past the largest kept), and a setup cache entry with
// its save.
type install struct {
	dir, db string
	saves   *saves.Dir
	asleep  saves.Manifest
	sealed  []byte
	lastSeq int64
	// asset is the bytes of the team's one asset (a tar), in
	// <dir>/assets.
	asset    []byte
	assetSum string
	// snap is the save of the snapshot snap_1 (its files).
	snap saves.Manifest
}

func newInstall(t *testing.T) install {
	t.Helper()
	ctx := t.Context()
	in := install{dir: t.TempDir()}
	in.db = filepath.Join(in.dir, "cove.db")
	st, err := sqlite.Open(ctx, in.db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateTeam(ctx, api.Team{ID: "team_1", Name: "one", CreatedAt: now, Admission: api.Admission{ManagedEnvironment: true}}))
	must(st.CreateKey(ctx, store.Key{ID: "key_1", TeamID: "team_1", Hash: "hash-of-the-key", CreatedAt: now}))
	in.sealed = []byte{0, 1, 2, 0xff, 'x'}
	_, err = st.PutSecret(ctx, store.Secret{TeamID: "team_1", Name: "TOKEN", KeyID: "k1", Nonce: []byte("nonce-bytes"),
		Ciphertext: in.sealed, CreatedAt: now, UpdatedAt: now})
	must(err)
	started := now.Add(-time.Minute)
	for _, sb := range []api.Sandbox{
		{ID: "sbx_asleep", TeamID: "team_1", Name: "kept", State: api.StateAsleep, CreatedAt: now, StartedAt: &started,
			Resources: api.Resources{CPUs: 1, MemoryMiB: 256, DiskMiB: 512}, Labels: map[string]string{"a": "b"},
			Volumes: []api.VolumeMount{{Name: "data", VolumeID: "vol_1", Path: "/data", ReadOnly: true}}},
		{ID: "sbx_gone", TeamID: "team_1", State: api.StateTerminated, CreatedAt: now},
	} {
		must(st.CreateSandbox(ctx, sb))
	}
	code := 3
	ended := now
	must(st.CreateCommand(ctx, api.Command{ID: "cmd_1", SandboxID: "sbx_asleep", Argv: []string{"sh", "-c", "exit 3"},
		State: api.CommandExited, ExitCode: &code, TimedOut: true, StartedAt: started, EndedAt: &ended}))
	for i := range 4 {
		_, err := st.AppendEvent(ctx, "team_1", api.Event{Type: "sandbox.created", SandboxID: "sbx_asleep", Time: now.Add(time.Duration(i) * time.Second)})
		must(err)
		in.lastSeq++
	}
	must(st.PutSetupCache(ctx, store.SetupCacheEntry{TeamID: "team_1", Key: "k1", SaveID: "cache_1", Size: 10, CreatedAt: now, LastUsedAt: now}))
	// A snapshot of the asleep sandbox, which the sandbox then stands on
	// (restored to it).
	chain := []store.Layer{{Snapshot: "snap_1", HostID: 1 << 30, Size: 65536}}
	must(st.CreateSnapshot(ctx, store.Snapshot{
		Snapshot: api.Snapshot{ID: "snap_1", TeamID: "team_1", Name: "ready", SandboxID: "sbx_asleep", SizeBytes: 10, DataBytes: 20,
			Digest: "sha256:aa", CreatedAt: now},
		Template: "busybox", Workdir: "/workspace", Layers: chain,
	}))
	must(st.SetSandboxLayers(ctx, "sbx_asleep", chain))
	blobs, err := sources.NewBlobs(filepath.Join(in.dir, "assets"))
	must(err)
	var tarred bytes.Buffer
	tw := tar.NewWriter(&tarred)
	must(tw.WriteHeader(&tar.Header{Name: "f", Mode: 0o644, Size: 4, Typeflag: tar.TypeReg}))
	_, err = tw.Write([]byte("f\x00\xff\n"))
	must(err)
	must(tw.Close())
	in.asset = tarred.Bytes()
	in.assetSum, _, err = blobs.Put(ctx, "team_1", bytes.NewReader(in.asset), 1<<20, "")
	must(err)
	must(st.CreateAsset(ctx, api.Asset{ID: "asset_1", TeamID: "team_1", Name: "a", Size: int64(len(in.asset)), SHA256: in.assetSum, CreatedAt: now}))
	must(st.CreateVolume(ctx, api.Volume{ID: "vol_1", TeamID: "team_1", Name: "data", SizeMiB: 64, UsedBytes: 4096, CreatedAt: now}))
	// The volume's image, where cove serve's node keeps it.
	must(os.MkdirAll(filepath.Join(in.dir, "volumes", "vol_1"), 0o700))
	must(os.WriteFile(filepath.Join(in.dir, "volumes", "vol_1", "disk.img"), []byte("ext4"), 0o600))
	st.Close()
	raw, err := sql.Open("sqlite", in.db)
	must(err)
	_, err = raw.Exec("DELETE FROM events WHERE seq = (SELECT max(seq) FROM events)")
	must(err)
	raw.Close()

	in.saves, err = saves.NewDir(filepath.Join(in.dir, "saves"))
	must(err)
	in.asleep = writeSave(t, in.saves, "sbx_asleep", "0-1700000000000000000", true)
	writeSave(t, in.saves, "cache_1", "0-1700000000000000001", false)
	in.snap = writeSave(t, in.saves, "snap_1", "0-1700000000000000002", false)
	return in
}

// TestMoveStore: every table's rows arrive, read back through the
// PostgreSQL store as the SQLite store read them; secrets stay the sealed
// bytes they were; the asleep sandbox is placed on no node with its moved
// save; a new event takes a key past every key the source handed out.
func TestMoveStore(t *testing.T) {
	ctx := t.Context()
	_, to, srv := newSaves(t)
	in := newInstall(t)
	url := pgserver.Start(t).NewDatabase(t)
	rep, err := Run(ctx, Config{
		From: "sqlite:" + in.db, To: url, Saves: srv.PrefixURL("cove"), VolumesNode: "node-a",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Saves, []string{"sbx_asleep", "cache_1", "snap_1"}) || !slices.Equal(rep.Snapshots, []string{"snap_1"}) ||
		rep.Placements != 1 || rep.AssetBlobs != 1 {
		t.Errorf("report: saves %v (snapshots %v), placements %d, asset bytes %d; want the three saves, one a snapshot's, one placement, one asset's bytes",
			rep.Saves, rep.Snapshots, rep.Placements, rep.AssetBlobs)
	}
	// The snapshot's files are in the target under its ID, byte for byte.
	if m, err := to.Stat(ctx, "snap_1", in.snap.Generation); err != nil || m.SHA256 != in.snap.SHA256 {
		t.Errorf("the snapshot's save in the target: %+v %v, want sha-256 %s", m, err, in.snap.SHA256)
	}
	// The asset's bytes are where cove control reads them.
	rc, err := to.GetBlob(ctx, sources.Digest(in.assetSum))
	if err != nil {
		t.Fatalf("the asset's bytes in the target save store: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, in.asset) {
		t.Errorf("the asset's bytes in the target: %q (%v), want %q", got, err, in.asset)
	}
	counts := map[string]int64{}
	for _, tc := range rep.Tables {
		counts[tc.Table] = tc.Rows
	}
	for table, want := range map[string]int64{"teams": 1, "api_keys": 1, "secrets": 1, "sandboxes": 2, "commands": 1, "events": 3, "setup_cache": 1} {
		if counts[table] != want {
			t.Errorf("%s: %d rows copied, want %d", table, counts[table], want)
		}
	}

	src, err := sqlite.Open(ctx, in.db)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := postgres.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	micro := cmp.Transformer("micro", func(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) })
	same := func(what string, a, b any) {
		t.Helper()
		if d := cmp.Diff(a, b, micro); d != "" {
			t.Errorf("%s differs after the move (-sqlite +postgres):\n%s", what, d)
		}
	}
	for _, read := range []struct {
		what string
		fn   func(store.Store) (any, error)
	}{
		{"teams", func(s store.Store) (any, error) { return s.ListTeams(ctx) }},
		{"key", func(s store.Store) (any, error) {
			k, team, err := s.KeyByHash(ctx, "hash-of-the-key")
			return []any{k, team}, err
		}},
		{"secret", func(s store.Store) (any, error) { return s.GetSecret(ctx, "team_1", "TOKEN") }},
		{"sandboxes", func(s store.Store) (any, error) {
			return s.ListSandboxes(ctx, store.SandboxFilter{TeamID: "team_1", Limit: 10})
		}},
		{"commands", func(s store.Store) (any, error) {
			return s.ListCommands(ctx, store.CommandFilter{SandboxID: "sbx_asleep", Limit: 10})
		}},
		{"events", func(s store.Store) (any, error) {
			return s.ListEvents(ctx, store.EventFilter{TeamID: "team_1", Limit: 10})
		}},
		{"setup cache", func(s store.Store) (any, error) { return s.ListSetupCache(ctx, "team_1") }},
		{"assets", func(s store.Store) (any, error) { return s.GetAsset(ctx, "team_1", "asset_1") }},
		{"volumes", func(s store.Store) (any, error) { return s.ListVolumes(ctx, "team_1", "", 0) }},
		{"snapshot", func(s store.Store) (any, error) { return s.GetSnapshot(ctx, "team_1", "ready") }},
		{"layers", func(s store.Store) (any, error) { return s.SandboxLayers(ctx, "sbx_asleep") }},
		{"snapshot users", func(s store.Store) (any, error) { return s.SnapshotUsers(ctx, "snap_1") }},
	} {
		a, err := read.fn(src)
		if err != nil {
			t.Fatalf("%s from sqlite: %v", read.what, err)
		}
		b, err := read.fn(dst)
		if err != nil {
			t.Fatalf("%s from postgres: %v", read.what, err)
		}
		if vs, ok := a.([]api.Volume); ok {
			// The volumes now name the node that holds their files.
			for i := range vs {
				vs[i].Node = "node-a"
			}
		}
		same(read.what, a, b)
	}
	sec, err := dst.GetSecret(ctx, "team_1", "TOKEN")
	if err != nil || string(sec.Ciphertext) != string(in.sealed) || string(sec.Nonce) != "nonce-bytes" {
		t.Errorf("the secret's sealed bytes are %x (%v), want %x as they were", sec.Ciphertext, err, in.sealed)
	}

	p, err := dst.GetPlacement(ctx, "sbx_asleep")
	if err != nil {
		t.Fatal(err)
	}
	if p.NodeID != "" || p.SaveNodeID != "" || p.Save != in.asleep.Generation || p.SavedAt == nil || p.Resources.MemoryMiB != 256 {
		t.Errorf("placement %+v: want on no node, the save's generation %s, its resources", p, in.asleep.Generation)
	}
	if _, err := to.Stat(ctx, "sbx_asleep", p.Save); err != nil {
		t.Errorf("the placement's save is not in the target: %v", err)
	}

	e, err := dst.AppendEvent(ctx, "team_1", api.Event{Type: "sandbox.woke", Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	evs, _ := src.ListEvents(ctx, store.EventFilter{TeamID: "team_1", Limit: 10})
	if n := len(evs); n == 0 || e.ID <= evs[n-1].ID {
		t.Fatalf("a new event's ID %s is not after the moved ones", e.ID)
	}
	var seq int64
	if err := dst.Pool().QueryRow(ctx, "SELECT max(seq) FROM events").Scan(&seq); err != nil || seq <= in.lastSeq {
		t.Errorf("a new event took seq %d (%v); the source had handed out up to %d", seq, err, in.lastSeq)
	}
}

// TestRefusesSnapshotWithoutFiles: a snapshot whose save the source lacks
// stops the move before anything is written, naming it: sandboxes on it
// could never start.
func TestRefusesSnapshotWithoutFiles(t *testing.T) {
	ctx := t.Context()
	_, to, srv := newSaves(t)
	in := newInstall(t)
	if err := in.saves.Delete(ctx, "snap_1"); err != nil {
		t.Fatal(err)
	}
	url := pgserver.Start(t).NewDatabase(t)
	_, err := Run(ctx, Config{From: "sqlite:" + in.db, To: url, Saves: srv.PrefixURL("cove"), VolumesNode: "node-a"})
	if api.ErrorCode(err) != api.CodePreconditionFailed || !strings.Contains(err.Error(), "snap_1") {
		t.Fatalf("a move with a snapshot without its files: %v, want precondition_failed naming snap_1", err)
	}
	if _, err := to.Stat(ctx, "sbx_asleep", ""); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("a refused move wrote a save to the target: %v", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tables, err := allPgTables(ctx, conn)
	if err != nil || len(tables) != 0 {
		t.Errorf("a refused move left tables %v (%v)", tables, err)
	}
}

// TestRefusesVolumesWithoutNode: a volume's files are not in the save
// store, so a move of an install with volumes names them and writes
// nothing unless it is told which node on this host will hold them; and
// with that node named, a volume whose image is missing is refused too.
func TestRefusesVolumesWithoutNode(t *testing.T) {
	ctx := t.Context()
	_, to, srv := newSaves(t)
	in := newInstall(t)
	url := pgserver.Start(t).NewDatabase(t)
	nothingWritten := func(what string) {
		t.Helper()
		if _, err := to.Stat(ctx, "sbx_asleep", ""); api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("%s: a refused move wrote a save to the target: %v", what, err)
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if tables, err := allPgTables(ctx, conn); err != nil || len(tables) != 0 {
			t.Errorf("%s: a refused move left tables %v (%v)", what, tables, err)
		}
	}
	_, err := Run(ctx, Config{From: "sqlite:" + in.db, To: url, Saves: srv.PrefixURL("cove")})
	if api.ErrorCode(err) != api.CodePreconditionFailed {
		t.Fatalf("a move with volumes and no --volumes-node: %v, want precondition_failed", err)
	}
	for _, want := range []string{"vol_1 (team_1/data)", "--volumes-node", "nothing was written"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	nothingWritten("no node")

	if err := os.Remove(filepath.Join(in.dir, "volumes", "vol_1", "disk.img")); err != nil {
		t.Fatal(err)
	}
	_, err = Run(ctx, Config{From: "sqlite:" + in.db, To: url, Saves: srv.PrefixURL("cove"), VolumesNode: "node-a"})
	if api.ErrorCode(err) != api.CodePreconditionFailed || !strings.Contains(err.Error(), "vol_1 (team_1/data) have no image") ||
		!strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("a move of a volume without its image: %v, want precondition_failed naming vol_1", err)
	}
	nothingWritten("no image")
}

// TestRefusesNonEmptyTarget: a database holding one of cove's tables is
// refused and left exactly as it was; one holding only tables of its own
// takes the move and keeps them.
func TestRefusesNonEmptyTarget(t *testing.T) {
	ctx := t.Context()
	_, _, srv := newSaves(t)
	in := newInstall(t)
	pg := pgserver.Start(t)
	for _, c := range []struct {
		name, setup string
		refused     bool
	}{
		{"a cove table", "CREATE TABLE teams (id text)", true},
		{"cove's migrations", "CREATE TABLE schema_migrations (version int)", true},
		{"a table of its own", "CREATE TABLE inventory (id text); INSERT INTO inventory VALUES ('x')", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := pg.NewDatabase(t)
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, c.setup); err != nil {
				t.Fatal(err)
			}
			before, _ := allPgTables(ctx, conn)
			_, err = Run(ctx, Config{From: "sqlite:" + in.db, To: url, Saves: srv.PrefixURL("cove"), VolumesNode: "node-a"})
			after, _ := allPgTables(ctx, conn)
			if !c.refused {
				if err != nil {
					t.Fatalf("Run = %v", err)
				}
				var n int
				if err := conn.QueryRow(ctx, "SELECT count(*) FROM inventory").Scan(&n); err != nil || n != 1 {
					t.Errorf("the database's own table has %d rows (%v) after the move", n, err)
				}
				return
			}
			if api.ErrorCode(err) != api.CodePreconditionFailed || !strings.Contains(err.Error(), "left untouched") {
				t.Fatalf("Run = %v; want precondition_failed", err)
			}
			if !slices.Equal(before, after) {
				t.Errorf("the refused database's tables went from %v to %v", before, after)
			}
		})
	}
}

// TestFailedCopyLeavesNoTables: a row that cannot be converted (JSON
// SQLite took and PostgreSQL does not, a NUL a tenant put in a label)
// fails the move naming its row and column, and the tables the move made
// are gone, so that once the row is mended the move runs again.
func TestFailedCopyLeavesNoTables(t *testing.T) {
	ctx := t.Context()
	_, _, srv := newSaves(t)
	pg := pgserver.Start(t)
	for _, c := range []struct{ name, labels, want string }{
		{"broken JSON", `{"a":`, "not JSON"},
		{"a NUL in a label", `{"a":"x\u0000y"}`, "NUL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := newInstall(t)
			raw, err := sql.Open("sqlite", in.db)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			if _, err := raw.Exec(`UPDATE sandboxes SET labels = ? WHERE id = 'sbx_gone'`, c.labels); err != nil {
				t.Fatal(err)
			}
			url := pg.NewDatabase(t)
			cfg := Config{From: "sqlite:" + in.db, To: url, Saves: srv.PrefixURL("cove"), VolumesNode: "node-a"}
			_, err = Run(ctx, cfg)
			if err == nil || !strings.Contains(err.Error(), "labels") || !strings.Contains(err.Error(), "sbx_gone") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run = %v; want an error naming the row, the column and %q", err, c.want)
			}
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if left, _ := allPgTables(ctx, conn); len(left) > 0 {
				t.Fatalf("a failed move left tables %v", left)
			}
			if _, err := raw.Exec(`UPDATE sandboxes SET labels = '{}' WHERE id = 'sbx_gone'`); err != nil {
				t.Fatal(err)
			}
			if _, err := Run(ctx, cfg); err != nil {
				t.Fatalf("the move run again: %v", err)
			}
		})
	}
}

// TestAssetBytesChecked: an asset whose bytes are missing from the data
// dir stops the move before anything is written, naming the asset; bytes
// altered on disk are refused by the save store, and the move fails
// before the database is touched.
func TestAssetBytesChecked(t *testing.T) {
	ctx := t.Context()
	_, to, srv := newSaves(t)
	pg := pgserver.Start(t)
	for _, c := range []struct {
		name   string
		damage func(path string) error
		want   string
	}{
		{"missing", os.Remove, "the bytes of assets asset_1 are missing"},
		{"altered", func(p string) error { return os.WriteFile(p, []byte("other bytes"), 0o600) }, "asset bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := newInstall(t)
			if err := c.damage(filepath.Join(in.dir, "assets", "team_1", in.assetSum)); err != nil {
				t.Fatal(err)
			}
			url := pg.NewDatabase(t)
			_, err := Run(ctx, Config{From: "sqlite:" + in.db, To: url, Saves: srv.PrefixURL("cove"), VolumesNode: "node-a"})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run = %v; want an error saying %q", err, c.want)
			}
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if tables, _ := allPgTables(ctx, conn); len(tables) != 0 {
				t.Errorf("the target holds tables %v after a failed move", tables)
			}
			if _, err := to.GetBlob(ctx, sources.Digest(in.assetSum)); err == nil && c.name == "missing" {
				t.Errorf("the missing asset's digest is in the save store")
			}
		})
	}
}
