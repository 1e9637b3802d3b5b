//go:build linux

// Package backup_test takes a backup of a running cove serve under load,
// restores it into a new data dir and serves from that.
package backup_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func cove_(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), args...).CombinedOutput()
	return string(out), err
}

func waitState(t *testing.T, c *cove.Client, id string, want api.SandboxState) api.Sandbox {
	t.Helper()
	for i := 0; i < 600; i++ {
		sb, err := c.GetSandbox(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == want {
			return sb
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("sandbox %s never reached %s", id, want)
	return api.Sandbox{}
}

func TestBackupRestoreUnderLoad(t *testing.T) {
	ctx := context.Background()
	s := e2etest.StartServer(t)
	team := s.NewTeam("backup-team")
	key := s.Keys()[len(s.Keys())-1]
	const value = "backup-secret-value-0123456789"
	if _, err := team.PutSecret(ctx, "tok", value); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(value))
	wantSum := hex.EncodeToString(sum[:])

	sleeper := e2etest.Create(t, team, api.CreateSandboxRequest{Name: "sleeper", Secrets: map[string]api.SecretRef{"TOKEN": {Secret: "tok"}}})
	e2etest.MustOK(t, team, sleeper.ID, "mkdir -p /root/work 2>/dev/null; for i in 1 2 3; do echo file-$i > /tmp/kept-$i; done")
	// A snapshot, whose files serve keeps in its save store, of 2 MiB of
	// random bytes that the sandbox then changes.
	e2etest.MustOK(t, team, sleeper.ID, "head -c 2097152 /dev/urandom > /workspace/snapped; sha256sum < /workspace/snapped > /tmp/snapped.sum")
	snapSum := e2etest.MustOK(t, team, sleeper.ID, "cat /tmp/snapped.sum")
	snap, err := team.CreateSnapshot(ctx, sleeper.ID, "before-backup")
	if err != nil {
		t.Fatal(err)
	}
	e2etest.MustOK(t, team, sleeper.ID, "echo changed > /workspace/snapped")
	if _, err := team.SleepSandbox(ctx, sleeper.ID); err != nil {
		t.Fatal(err)
	}
	waitState(t, team, sleeper.ID, api.StateAsleep)

	// A volume with files of user's and root's, mounted and written to
	// by a running sandbox while the backup runs (under /data/churn, left
	// out of the comparison).
	vol, err := team.CreateVolume(ctx, "shared", 32)
	if err != nil {
		t.Fatal(err)
	}
	writer := e2etest.Create(t, team, api.CreateSandboxRequest{Name: "writer", Volumes: []api.VolumeMount{{Name: "shared", Path: "/data"}}})
	e2etest.MustOK(t, team, writer.ID, "cd /data && head -c 3000000 /dev/urandom > big && mkdir -m 750 dir && echo deep > dir/f && chmod 640 dir/f && ln -s dir/f link && mkdir churn")
	e2etest.MustOK(t, team, writer.ID, "cd /data && echo root > owned && chown 1234:2345 owned && chmod 604 owned && mkdir -m 700 rootdir", e2etest.AsRoot)
	const volState = "cd /data && find . -path ./churn -prune -o -print | sort | while read f; do stat -c '%n %u:%g:%a' \"$f\"; [ -f \"$f\" ] && [ ! -L \"$f\" ] && sha256sum \"$f\"; done; true"
	volBefore := e2etest.MustOK(t, team, writer.ID, volState, e2etest.AsRoot)
	if !strings.Contains(volBefore, "./big 1000:1000:") || !strings.Contains(volBefore, "./owned 1234:2345:604") {
		t.Fatalf("the volume before the backup:\n%s", volBefore)
	}
	e2etest.MustOK(t, team, writer.ID, "nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /data/churn/f-$((i%50)); done' >/dev/null 2>&1 &")

	busy := e2etest.Create(t, team, api.CreateSandboxRequest{Name: "busy"})
	// Load while the backup runs: a loop in the sandbox writing files,
	// and commands sent one after another (each one rows in the database).
	e2etest.MustOK(t, team, busy.ID, "nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /tmp/f-$((i%200)); done' >/dev/null 2>&1 &")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := team.ExecWait(ctx, busy.ID, api.CreateCommandRequest{Command: "echo load"}); err == nil {
				sent++
			}
		}
	}()

	// Under /var/tmp and searchable, as cove serve needs the path to its
	// data dir to be for a sandbox's root.
	base, err := os.MkdirTemp("/var/tmp", "cove-e2e-backup-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o711)
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "bk")
	out, err := cove_(t, "admin", "backup", "--data-dir", s.DataDir, dir)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("backup: %v: %s", err, out)
	}
	t.Logf("backup under load (%d commands ran during it): %s", sent, out)
	if sent == 0 {
		t.Fatal("no command ran during the backup: no load")
	}
	if _, err := os.Stat(filepath.Join(dir, "volume-"+vol.ID+".img")); err != nil || !strings.Contains(out, "volumes copied (each frozen while copied): "+vol.ID) {
		t.Fatalf("the backup lacks the volume's image: %v\n%s", err, out)
	}

	// A second backup into the same directory is refused.
	if out, err := cove_(t, "admin", "backup", "--data-dir", s.DataDir, dir); err == nil || !strings.Contains(out, "already exists") {
		t.Fatalf("backup into an existing dir: %v: %s", err, out)
	}

	// Modes: the directory 0700, every file 0600; no admin key in clear.
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("backup dir: %v %v", fi.Mode(), err)
	}
	ents, _ := os.ReadDir(dir)
	adminKey, _ := os.ReadFile(filepath.Join(s.DataDir, "admin-api-key"))
	for _, e := range ents {
		fi, _ := e.Info()
		if fi.Mode().Perm() != 0o600 || !fi.Mode().IsRegular() {
			t.Errorf("%s: mode %v, want 0600", e.Name(), fi.Mode())
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if strings.Contains(string(b), strings.TrimSpace(string(adminKey))) {
			t.Errorf("%s holds the admin key in clear", e.Name())
		}
		if e.Name() == "secrets.key" {
			t.Errorf("secrets.key copied without --with-secrets-key")
		}
	}

	// Restore refuses a non-empty target, and a missing secrets key.
	full := filepath.Join(base, "full")
	os.Mkdir(full, 0o700)
	os.WriteFile(filepath.Join(full, "x"), []byte("x"), 0o600)
	if out, err := cove_(t, "admin", "restore", dir, "--data-dir", full); err == nil || !strings.Contains(out, "not empty") {
		t.Fatalf("restore into a non-empty dir: %v: %s", err, out)
	}
	restored := filepath.Join(base, "restored")
	if out, err := cove_(t, "admin", "restore", dir, "--data-dir", restored); err == nil || !strings.Contains(out, "--secrets-key-file") {
		t.Fatalf("restore without a secrets key: %v: %s", err, out)
	}
	if _, err := os.Stat(restored); !os.IsNotExist(err) {
		t.Fatalf("a refused restore left %s: %v", restored, err)
	}
	// A damaged backup is refused.
	damaged := filepath.Join(base, "damaged")
	exec.Command("cp", "-a", dir, damaged).Run()
	f, _ := os.OpenFile(filepath.Join(damaged, "cove.db"), os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte("x"))
	f.Close()
	if out, err := cove_(t, "admin", "restore", damaged, "--data-dir", filepath.Join(base, "d2"), "--secrets-key-file", filepath.Join(s.DataDir, "secrets.key")); err == nil || !strings.Contains(out, "does not match its manifest") {
		t.Fatalf("restore of a damaged backup: %v: %s", err, out)
	}

	out, err = cove_(t, "admin", "restore", dir, "--data-dir", restored, "--secrets-key-file", filepath.Join(s.DataDir, "secrets.key"))
	if err != nil {
		t.Fatalf("restore: %v: %s", err, out)
	}
	t.Logf("restore: %s", out)
	if !strings.Contains(out, "volumes restored: "+vol.ID) {
		t.Errorf("restore does not report the volume:\n%s", out)
	}
	t.Cleanup(func() { os.RemoveAll(restored) })
	// The operator keeps the admin key; the backup does not.
	os.WriteFile(filepath.Join(restored, "admin-api-key"), adminKey, 0o600)

	// Stop the original first, as an operator moving hosts would; the
	// restored serve has its own table and subnet regardless.
	s.TerminateAll()
	s.Stop(15)
	// Started again once the restored server is gone, so that its own
	// cleanup ends what it still runs (its warm pool).
	t.Cleanup(s.Start)
	r := e2etest.StartServer(t, e2etest.WithDataDir(restored))
	rteam := cove.New(r.URL, key)
	// r's own cleanup knows only the admin key.
	t.Cleanup(func() {
		if _, err := rteam.TerminateSandbox(ctx, sleeper.ID); err == nil {
			rteam.WaitSandbox(ctx, sleeper.ID, api.StateTerminated, time.Minute)
		}
	})

	got, err := rteam.GetSandbox(ctx, busy.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.StateFailed && got.State != api.StateAsleep {
		t.Fatalf("the sandbox running at backup time is %s (%q), want asleep or failed", got.State, got.StateReason)
	}
	t.Logf("running at backup time: %s (%s)", got.State, got.StateReason)

	if _, err := rteam.WakeSandbox(ctx, sleeper.ID); err != nil {
		t.Fatal(err)
	}
	waitState(t, rteam, sleeper.ID, api.StateRunning)
	if o := e2etest.MustOK(t, rteam, sleeper.ID, "cat /tmp/kept-1 /tmp/kept-2 /tmp/kept-3"); o != "file-1\nfile-2\nfile-3\n" {
		t.Fatalf("files after restore: %q", o)
	}
	if o := e2etest.MustOK(t, rteam, sleeper.ID, `printf %s "$TOKEN" | sha256sum | cut -d' ' -f1`); strings.TrimSpace(o) != wantSum {
		t.Fatalf("secret after restore hashes to %q, want %q", o, wantSum)
	}

	// The volume came back with its files, owners and modes.
	if got, err := rteam.GetVolume(ctx, "shared"); err != nil || got.ID != vol.ID {
		t.Fatalf("the volume after restore: %+v, %v", got, err)
	}
	reader := e2etest.Create(t, rteam, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "shared", Path: "/data"}}})
	t.Cleanup(func() { rteam.TerminateSandbox(context.Background(), reader.ID) })
	if volAfter := e2etest.MustOK(t, rteam, reader.ID, volState, e2etest.AsRoot); volAfter != volBefore {
		t.Fatalf("the volume after restore:\n%s\nwant:\n%s", volAfter, volBefore)
	}
	if o := e2etest.MustOK(t, rteam, reader.ID, "echo after > /data/after && cat /data/dir/f /data/after"); o != "deep\nafter\n" {
		t.Fatalf("user in the restored volume: %q", o)
	}

	// The snapshot came back with its files: a sandbox started on it, and
	// the sandbox returned to it, have them byte for byte.
	if got, err := rteam.GetSnapshot(ctx, "before-backup"); err != nil || got.ID != snap.ID || got.Digest != snap.Digest {
		t.Fatalf("the snapshot after restore: %+v, %v", got, err)
	}
	on := e2etest.Create(t, rteam, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceSnapshot, SnapshotID: snap.ID}})
	t.Cleanup(func() { rteam.TerminateSandbox(context.Background(), on.ID) })
	if o := e2etest.MustOK(t, rteam, on.ID, "sha256sum < /workspace/snapped"); o != snapSum {
		t.Fatalf("a sandbox on the restored snapshot: sha-256 %q, want %q", o, snapSum)
	}
	if _, err := rteam.RestoreSandbox(ctx, sleeper.ID, snap.ID, true); err != nil {
		t.Fatal(err)
	}
	if o := e2etest.MustOK(t, rteam, sleeper.ID, "sha256sum < /workspace/snapped"); o != snapSum {
		t.Fatalf("the sandbox returned to the restored snapshot: sha-256 %q, want %q", o, snapSum)
	}
}
