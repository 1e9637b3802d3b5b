// Package migrate tests `cove admin migrate-store` whole: a `cove serve`
// install is moved to PostgreSQL and an S3 save store, and its asleep
// sandbox wakes through `cove control` on a `cove node`.
package migrate

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	it "github.com/cove-dev/cove/internal/images/imagetest"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
	"github.com/cove-dev/cove/internal/testsupport/s3server"
	cove "github.com/cove-dev/cove/sdk/go"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestMain(m *testing.M) { e2etest.Main(m, pgserver.Shutdown) }

// replay is the whole recorded output of a command, every record in
// order as JSON lines.
func replay(t *testing.T, c *cove.Client, sb, cmd string) []byte {
	t.Helper()
	var b bytes.Buffer
	err := c.Output(context.Background(), sb, cmd, 0, false, func(r api.OutputRecord) error {
		line, _ := json.Marshal(r)
		b.Write(append(line, '\n'))
		return nil
	})
	if err != nil {
		t.Fatalf("output of %s: %v", cmd, err)
	}
	return b.Bytes()
}

func sha(t *testing.T, c *cove.Client, id, path string) string {
	t.Helper()
	var b bytes.Buffer
	if _, err := c.DownloadFile(context.Background(), id, path, &b); err != nil {
		t.Fatalf("download %s: %v", path, err)
	}
	s := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(s[:])
}

// migrateStore runs `cove admin migrate-store` and returns its output.
func migrateStore(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), append([]string{"admin", "migrate-store"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestServeToFleet: a cove serve install with a team, a secret, an asleep
// sandbox with files and command history, a snapshot, and an ended sandbox is moved
// to PostgreSQL and an S3 bucket. The move refuses while a sandbox runs;
// then, through cove control on the moved store and a cove node, the
// sandbox wakes with its files, every earlier command's output replays
// byte for byte, its secret still resolves under serve's key, and serve's
// keys are still the teams' keys.
func TestServeToFleet(t *testing.T) {
	ctx := context.Background()
	srv := e2etest.StartServer(t)
	c := srv.NewTeam("movers")
	teamKey := srv.Keys()[1]
	b := make([]byte, 16)
	rand.Read(b)
	secret := "cove-moved-secret-" + hex.EncodeToString(b)
	if _, err := c.PutSecret(ctx, "tok", secret); err != nil {
		t.Fatal(err)
	}
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "mover", Secrets: map[string]api.SecretRef{"TOKEN": {Secret: "tok"}}})
	e2etest.MustOK(t, c, sb.ID, "head -c 5242880 /dev/urandom > /workspace/big && mkdir -p /workspace/d && echo hi > /workspace/d/f")
	sum := sha(t, c, sb.ID, "/workspace/big")
	outputs := map[string][]byte{}
	for _, cmd := range []string{"echo one; echo two >&2; echo three", "seq 1 2000", `printf 'x %s y\n' "$TOKEN"`} {
		r, err := c.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: cmd})
		if err != nil {
			t.Fatal(err)
		}
		outputs[r.Command.ID] = replay(t, c, sb.ID, r.Command.ID)
	}
	// An asset, whose bytes serve keeps in its data dir.
	asset, err := c.SaveAsset(ctx, sb.ID, api.SaveAssetRequest{Path: "/workspace/d", Name: "tools"})
	if err != nil {
		t.Fatal(err)
	}
	assetBytes := readAsset(t, c, asset.ID)
	// A snapshot, whose files serve keeps in its save store: taken of the
	// running sandbox, then the sandbox's own copy of the file changes.
	snap, err := c.CreateSnapshot(ctx, sb.ID, "before-move")
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox returns to it, so that it stands on the snapshot when it
	// sleeps and moves: its wake on the node needs the snapshot's files.
	if _, err := c.RestoreSandbox(ctx, sb.ID, snap.ID, true); err != nil {
		t.Fatal(err)
	}
	e2etest.MustOK(t, c, sb.ID, "echo after > /workspace/d/f")
	// An imported image, whose parts serve keeps in its save store.
	imported := importImage(t, srv.Admin)
	gone := e2etest.Create(t, c, api.CreateSandboxRequest{})
	if _, err := c.TerminateSandbox(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(ctx, gone.ID, api.StateTerminated, time.Minute); err != nil {
		t.Fatal(err)
	}

	// A volume with user's files: they stay in serve's data dir, which the
	// fleet's node on this host takes as its own.
	if _, err := c.CreateVolume(ctx, "shared", 16); err != nil {
		t.Fatal(err)
	}
	vsb := e2etest.Create(t, c, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "shared", Path: "/data"}}})
	const volState = "cd /data && head -c 1000000 /dev/urandom > r && chmod 640 r; stat -c '%n %u:%g:%a' r && sha256sum r"
	volBefore := e2etest.MustOK(t, c, vsb.ID, volState)
	if _, err := c.TerminateSandbox(ctx, vsb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(ctx, vsb.ID, api.StateTerminated, time.Minute); err != nil {
		t.Fatal(err)
	}

	pgURL := pgserver.Start(t).NewDatabase(t)
	s3 := s3server.Start(t)
	saves := s3.PrefixURL("moved-" + e2etest.RunID())
	creds := filepath.Join(t.TempDir(), "s3-credentials")
	if err := os.WriteFile(creds, []byte("[default]\naws_access_key_id = "+s3.AccessKey+"\naws_secret_access_key = "+s3.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--from", "sqlite:" + filepath.Join(srv.DataDir, "cove.db"), "--to", pgURL, "--saves", saves, "--saves-credentials", creds}

	// While the sandbox runs the move names it and writes nothing.
	srv.Stop(syscall.SIGTERM)
	out, err := migrateStore(t, nil, args...)
	if err == nil || !strings.Contains(out, sb.ID+" (running)") {
		t.Fatalf("a move with a running sandbox: %v\n%s", err, out)
	}
	srv.Start()
	if _, err := c.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(ctx, sb.ID, api.StateAsleep, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	srv.Stop(syscall.SIGTERM)
	// The volume's files are not in the save store: without the node
	// that will hold them the move names it and writes nothing.
	if out, err := migrateStore(t, nil, args...); err == nil || !strings.Contains(out, "(shared)") && !strings.Contains(out, "/shared)") || !strings.Contains(out, "--volumes-node") {
		t.Fatalf("a move with a volume and no --volumes-node: %v\n%s", err, out)
	}
	args = append(args, "--volumes-node", "vol-host")
	began := time.Now()
	out, err = migrateStore(t, nil, args...)
	if err != nil {
		t.Fatalf("migrate-store: %v\n%s", err, out)
	}
	t.Logf("migrate-store took %v:\n%s", time.Since(began).Round(time.Millisecond), out)
	if !strings.Contains(out, "asleep sandboxes placed to wake from them on any node: 1") {
		t.Errorf("the report does not count the asleep sandbox:\n%s", out)
	}
	if !strings.Contains(out, "snapshots' files among them: 1") {
		t.Errorf("the report does not count the snapshot:\n%s", out)
	}
	if !strings.Contains(out, "imported images moved to the save store: 1") || strings.Contains(out, "cannot fetch") {
		t.Errorf("the report does not count the imported image as moved:\n%s", out)
	}
	// A second move into the same database is refused: it holds cove's
	// tables now.
	if out, err := migrateStore(t, nil, args...); err == nil || !strings.Contains(out, "already holds cove's tables") {
		t.Errorf("a second move into the same database: %v\n%s", err, out)
	}

	adminKey, err := os.ReadFile(filepath.Join(srv.DataDir, "admin-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	f := e2etest.StartFleet(t, e2etest.FleetNodes(1), e2etest.FleetLostAfter(20*time.Second),
		e2etest.FleetControlArgs("--store", pgURL, "--secrets-key-file", filepath.Join(srv.DataDir, "secrets.key"),
			"--saves", saves, "--saves-credentials", creds),
		e2etest.FleetNodeArgs("--saves", saves, "--saves-credentials", creds),
		e2etest.FleetSeedControl(func(dir string) {
			if err := os.WriteFile(filepath.Join(dir, "admin-api-key"), adminKey, 0o600); err != nil {
				t.Fatal(err)
			}
		}))
	fc := cove.New(f.Control.URL, teamKey)
	defer fc.TerminateSandbox(context.Background(), sb.ID)
	got, err := fc.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != api.StateAsleep || got.Name != "mover" {
		t.Fatalf("the moved sandbox through cove control: %+v, %v", got, err)
	}
	if g, err := fc.GetSandbox(ctx, gone.ID); err != nil || g.State != api.StateTerminated {
		t.Fatalf("the moved ended sandbox: %+v, %v", g, err)
	}
	if _, err := fc.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := fc.WaitSandbox(ctx, sb.ID, api.StateRunning, 2*time.Minute); err != nil {
		t.Fatalf("wake through the fleet: %v\ncontrol:\n%s", err, f.Control.Tail(4000))
	}
	if got := sha(t, fc, sb.ID, "/workspace/big"); got != sum {
		t.Errorf("the 5 MiB file after the move: sha-256 %s, want %s", got, sum)
	}
	if got := e2etest.MustOK(t, fc, sb.ID, "cat /workspace/d/f"); got != "after\n" {
		t.Errorf("small file after the move: %q", got)
	}
	for id, want := range outputs {
		if got := replay(t, fc, sb.ID, id); !bytes.Equal(got, want) {
			t.Errorf("command %s replays differently after the move:\n got %q\nwant %q", id, got, want)
		}
	}
	// The snapshot's files went to the save store: a sandbox started on
	// it on the node, which never had its layer, has the files as they
	// were when it was taken.
	if got, err := fc.GetSnapshot(ctx, "before-move"); err != nil || got.ID != snap.ID || got.Digest != snap.Digest {
		t.Fatalf("the moved snapshot: %+v, %v", got, err)
	}
	ssb := e2etest.Create(t, fc, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceSnapshot, SnapshotID: snap.ID}})
	defer fc.TerminateSandbox(context.Background(), ssb.ID)
	if got := sha(t, fc, ssb.ID, "/workspace/big"); got != sum {
		t.Errorf("the 5 MiB file of a sandbox on the moved snapshot: sha-256 %s, want %s", got, sum)
	}
	if got := e2etest.MustOK(t, fc, ssb.ID, "cat /workspace/d/f"); got != "hi\n" {
		t.Errorf("a small file of a sandbox on the moved snapshot: %q", got)
	}
	if err := fc.DeleteSnapshot(ctx, snap.ID); api.ErrorCode(err) != api.CodeConflict || !strings.Contains(err.Error(), ssb.ID) || !strings.Contains(err.Error(), sb.ID) {
		t.Errorf("delete of the moved snapshot sandboxes stand on: %v, want 409 naming %s and %s", err, ssb.ID, sb.ID)
	}
	// The asset's bytes went to the save store: cove control, with
	// none of serve's data dir, serves them.
	if got := readAsset(t, fc, asset.ID); !bytes.Equal(got, assetBytes) {
		t.Errorf("the asset through cove control: %d bytes, want the %d serve had", len(got), len(assetBytes))
	}
	// The imported image starts a sandbox on the node, which has never
	// seen it: its parts came through the save store.
	isb := e2etest.Create(t, f.Control.Admin, api.CreateSandboxRequest{Template: imported.Template})
	defer f.Control.Admin.TerminateSandbox(context.Background(), isb.ID)
	if got := e2etest.MustOK(t, f.Control.Admin, isb.ID, "cat /data/hello"); got != "from serve\n" {
		t.Errorf("a file of the moved image: %q", got)
	}
	// The secret, sealed by serve, opens under serve's key on the control
	// plane and reaches the command on the node.
	res := e2etest.Sh(t, fc, sb.ID, `printf %s "$TOKEN" | sha256sum | cut -c1-64`)
	want := sha256.Sum256([]byte(secret))
	if strings.TrimSpace(res.Stdout) != hex.EncodeToString(want[:]) {
		t.Errorf("the moved secret resolves to a value of sha-256 %q, want %x", res.Stdout, want)
	}
	// The node on serve's host, with serve's data dir, holds the volume: a
	// sandbox that mounts it runs there and reads user's file as it was.
	f.AddNodeSeededNoWait("vol-host", func(dir string) {
		if err := os.Symlink(srv.DataDir, dir); err != nil {
			t.Fatal(err)
		}
	})
	for i := 0; ; i++ {
		ns, err := f.Control.Admin.ListNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(ns, func(n api.Node) bool { return n.Name == "vol-host" && n.State == api.NodeReady }) {
			break
		}
		if i == 1500 {
			t.Fatalf("node vol-host never became ready:\n%s", f.Node("vol-host").Tail(4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	rsb := e2etest.Create(t, fc, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "shared", Path: "/data"}}})
	defer fc.TerminateSandbox(context.Background(), rsb.ID)
	if got := e2etest.MustOK(t, fc, rsb.ID, "cd /data && stat -c '%n %u:%g:%a' r && sha256sum r"); got != volBefore {
		t.Errorf("the moved volume on its node: %q, want %q", got, volBefore)
	}
	// Serve's admin key is the fleet's admin key.
	if _, err := f.Control.Admin.ListTeams(ctx); err != nil {
		t.Errorf("serve's admin key on the fleet: %v", err)
	}
}

// readAsset reads an asset's bytes whole, checked against their digest.
func readAsset(t *testing.T, c *cove.Client, id string) []byte {
	t.Helper()
	r, err := c.ReadAsset(t.Context(), id)
	if err != nil {
		t.Fatalf("read asset %s: %v", id, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read asset %s: %v", id, err)
	}
	return b
}

// importImage imports a busybox image with a file of its own, by the
// admin team (which has every admission).
func importImage(t *testing.T, c *cove.Client) api.Image {
	t.Helper()
	img := it.Image(t, v1.Config{Env: []string{"PATH=/bin"}},
		it.Busybox(t, false, "", ""),
		it.Layer(t, it.Dir("data", 0o755), it.File("data/hello", "from serve\n", 0o644)))
	path := filepath.Join(t.TempDir(), "image.tar")
	it.OCIArchive(t, img, path, nil)
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	got, err := c.ImportImage(t.Context(), "moved-"+e2etest.RunID(), nil, file)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	return got
}
