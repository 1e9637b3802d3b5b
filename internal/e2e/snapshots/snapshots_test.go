// Package snapshots holds the root tests of snapshots and forks (issue
// #32): a sandbox's files frozen into a snapshot shared read-only by the
// sandboxes started on it, a sandbox returned to a snapshot, and forks.
package snapshots

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m, pgserver.Shutdown) }

// treeSum prints the sha-256 of the tree under dir: every file's path,
// owner, mode and content.
func treeSum(dir string) string {
	return `cd ` + dir + ` && find . -type f | sort | while read f; do stat -c '%n %U:%G %a' "$f"; sha256sum < "$f"; done | sha256sum | cut -d' ' -f1`
}

// fill writes mib MiB of random files under /workspace/data as user.
func fill(t *testing.T, c *cove.Client, id string, mib int) {
	t.Helper()
	e2etest.MustOK(t, c, id, fmt.Sprintf(`set -e; mkdir -p /workspace/data/deep; cd /workspace/data
for i in $(seq 1 %d); do dd if=/dev/urandom of=f$i bs=1M count=1 2>/dev/null; done
echo small > deep/s; ln -s deep/s link`, mib), e2etest.WithTimeout(600))
}

// hostRange is the host uid that root of sandbox id is.
func hostRange(t *testing.T, c *cove.Client, id string) string {
	t.Helper()
	f := strings.Fields(e2etest.MustOK(t, c, id, "cat /proc/self/uid_map", e2etest.AsRoot))
	if len(f) != 3 {
		t.Fatalf("uid_map of %s: %q", id, f)
	}
	return f[1]
}

// allocated is what a file takes on the host's disk; 0 when it is gone.
func allocated(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// dirAllocated sums what the files under dir take on dir's filesystem
// (not in the filesystems mounted below it).
func dirAllocated(t testing.TB, dir string) int64 {
	t.Helper()
	var root syscall.Stat_t
	if err := syscall.Stat(dir, &root); err != nil {
		return 0
	}
	var n int64
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Dev != root.Dev {
			return filepath.SkipDir
		}
		if info.Mode().IsRegular() {
			n += allocated(p)
		}
		return nil
	})
	return n
}

// TestFork forks a sandbox holding 100 MiB of files into 5: each fork's
// tree is byte-identical to the parent's and owned by its own user, each
// runs in an ID range of its own, a write in one shows in no other nor in
// the parent, and the data disk holds the parent's files once for all of
// them (the forks' own disks hold only what they wrote).
func TestFork(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--max-fork", "8"))
	c, ctx := s.Admin, t.Context()
	const mib, count = 100, 5
	parent := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "parent", Labels: map[string]string{"app": "p"}})
	fill(t, c, parent.ID, mib)
	want := e2etest.MustOK(t, c, parent.ID, treeSum("/workspace"))
	// A command that runs through the fork goes on.
	bg, err := c.Exec(ctx, parent.ID, api.CreateCommandRequest{Command: "sleep 600"})
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	forks, err := c.ForkSandbox(ctx, parent.ID, api.ForkSandboxRequest{Count: count, Labels: map[string]string{"fork": "yes"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fork of %d MiB into %d: %v", mib, count, time.Since(t0))
	if len(forks) != count {
		t.Fatalf("%d forks, want %d", len(forks), count)
	}
	if cmd, err := c.GetCommand(ctx, parent.ID, bg.ID); err != nil || cmd.State != api.CommandRunning {
		t.Errorf("parent's command after the fork: %s %v", cmd.State, err)
	}
	ranges := map[string]string{hostRange(t, c, parent.ID): parent.ID}
	for i, f := range forks {
		if f.State != api.StateRunning || f.ID == parent.ID || f.Labels["fork"] != "yes" {
			t.Fatalf("fork %d: %+v", i, f)
		}
		if f.Source == nil || f.Source.Type != api.SourceSnapshot {
			t.Errorf("fork %d's source: %+v", i, f.Source)
		}
		if got := e2etest.MustOK(t, c, f.ID, treeSum("/workspace")); got != want {
			t.Errorf("fork %d: tree %s, parent's %s", i, strings.TrimSpace(got), strings.TrimSpace(want))
		}
		if out := e2etest.MustOK(t, c, f.ID, "stat -c %U:%G /workspace/data/f1 /workspace/data/deep; readlink /workspace/data/link"); out != "user:user\nuser:user\ndeep/s\n" {
			t.Errorf("fork %d sees %q", i, out)
		}
		r := hostRange(t, c, f.ID)
		if other, ok := ranges[r]; ok {
			t.Errorf("fork %d runs in host range %s, as %s does", i, r, other)
		}
		ranges[r] = f.ID
	}
	e2etest.MustOK(t, c, forks[0].ID, "echo only0 > /workspace/data/f1 && echo more >> /workspace/data/deep/s && touch /workspace/new0")
	for _, id := range append([]string{parent.ID}, ids(forks[1:])...) {
		if out := e2etest.MustOK(t, c, id, "head -c 5 /workspace/data/f1 | grep -c only0; cat /workspace/data/deep/s; ls /workspace/new0 2>&1 | grep -c 'No such'"); out != "0\nsmall\n1\n" {
			t.Errorf("%s sees fork 0's writes: %q", id, out)
		}
	}
	e2etest.MustOK(t, c, parent.ID, "echo parent > /workspace/data/f2")
	if out := e2etest.MustOK(t, c, forks[1].ID, "head -c 6 /workspace/data/f2 | grep -c parent || true"); out != "0\n" {
		t.Errorf("fork 1 sees the parent's later write: %q", out)
	}

	// The data disk: the frozen files are kept once for all the forks, in
	// two forms (raw as the node's layer, compressed in the save store,
	// which survives the node); each fork's own disk holds only what it
	// wrote. Copies would take count times the parent.
	sandboxes := filepath.Join(s.DataDir, "sandboxes")
	parentBytes := int64(mib) << 20
	var forksBytes int64
	for _, f := range forks {
		forksBytes += allocated(filepath.Join(sandboxes, f.ID, "disk.img"))
	}
	layers := dirAllocated(t, filepath.Join(sandboxes, ".layers"))
	saved := dirAllocated(t, filepath.Join(s.DataDir, "saves"))
	t.Logf("parent %d MiB; %d forks' disks %d MiB together; layer %d MiB; save store %d MiB", mib, count, forksBytes>>20, layers>>20, saved>>20)
	if forksBytes > parentBytes/4 {
		t.Errorf("%d forks' own disks take %d bytes: the parent's files were copied into them", count, forksBytes)
	}
	if grew := forksBytes + layers + saved; grew > 5*parentBytes/2 {
		t.Errorf("the data disk grew by %d bytes for %d forks of %d bytes, far from shared", grew, count, parentBytes)
	}

	// The fork's snapshot is the team's, charged and listed; it stays
	// while its forks stand on it.
	l, err := c.ListSnapshots(ctx, parent.ID, 0, "")
	if err != nil || len(l.Items) != 1 || !l.Items[0].Fork || l.Items[0].SandboxID != parent.ID {
		t.Fatalf("snapshots of the parent: %+v %v", l.Items, err)
	}
	if err := c.DeleteSnapshot(ctx, l.Items[0].ID); api.ErrorCode(err) != api.CodeConflict || !strings.Contains(err.Error(), forks[0].ID) {
		t.Errorf("delete the fork's snapshot while forks run: %v", err)
	}

	// The fork's snapshot goes with its last fork.
	for _, f := range forks {
		if _, err := c.TerminateSandbox(ctx, f.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range forks {
		if _, err := c.WaitSandbox(ctx, f.ID, api.StateTerminated, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var gone error
	for i := 0; i < 100; i++ {
		if _, gone = c.GetSnapshot(ctx, l.Items[0].ID); api.ErrorCode(gone) == api.CodeNotFound {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if api.ErrorCode(gone) != api.CodeNotFound {
		t.Errorf("the fork's snapshot after its forks ended: %v", gone)
	}
	if _, err := os.Stat(filepath.Join(sandboxes, ".layers", l.Items[0].ID)); !os.IsNotExist(err) {
		t.Errorf("the fork's layer after its forks ended: %v", err)
	}

	// Past --max-fork: 400 naming the limit.
	if _, err := c.ForkSandbox(ctx, parent.ID, api.ForkSandboxRequest{Count: 9}, false); api.ErrorCode(err) != api.CodeInvalidArgument || !strings.Contains(err.Error(), "8") {
		t.Errorf("fork of 9 past --max-fork 8: %v", err)
	}
	if _, err := c.ForkSandbox(ctx, parent.ID, api.ForkSandboxRequest{Count: 2, Names: []string{"one"}}, false); api.ErrorCode(err) != api.CodeInvalidArgument {
		t.Errorf("fork with 1 name for 2: %v", err)
	}
}

func ids(sbs []api.Sandbox) []string {
	var out []string
	for _, s := range sbs {
		out = append(out, s.ID)
	}
	return out
}

// TestRestore returns a sandbox to a snapshot after `rm -rf` of its
// workdir: the files come back, running commands end, and the sandbox
// keeps its ID, name and history. A snapshot of an asleep sandbox starts
// a new one.
func TestRestore(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	c, ctx := s.Admin, t.Context()
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "work"})
	fill(t, c, sb.ID, 3)
	e2etest.MustOK(t, c, sb.ID, "echo root-owned > /root/r", e2etest.AsRoot)
	want := e2etest.MustOK(t, c, sb.ID, treeSum("/workspace"))
	snap, err := c.CreateSnapshot(ctx, "work", "ready")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(snap.ID, "snap_") || snap.Name != "ready" || snap.SandboxID != sb.ID || snap.SizeBytes <= 0 ||
		len(snap.Digest) != len("sha256:")+64 || snap.CreatedAt.IsZero() {
		t.Errorf("snapshot: %+v", snap)
	}
	if got, err := c.GetSnapshot(ctx, "ready"); err != nil || got.ID != snap.ID || got.Digest != snap.Digest {
		t.Errorf("get by name: %+v %v", got, err)
	}
	if _, err := c.CreateSnapshot(ctx, "work", "ready"); api.ErrorCode(err) != api.CodeConflict {
		t.Errorf("a second snapshot named ready: %v", err)
	}

	e2etest.MustOK(t, c, sb.ID, "rm -rf /workspace/* && echo later > /workspace/later && ls /workspace")
	running, err := c.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	restored, err := c.RestoreSandbox(ctx, "work", "ready", true)
	if err != nil {
		t.Fatal(err)
	}
	if restored.ID != sb.ID || restored.Name != "work" || restored.State != api.StateRunning {
		t.Fatalf("restored: %+v", restored)
	}
	if got := e2etest.MustOK(t, c, sb.ID, treeSum("/workspace")); got != want {
		t.Errorf("tree after restore %s, want %s", got, want)
	}
	if out := e2etest.MustOK(t, c, sb.ID, "cat /root/r; ls /workspace/later 2>&1 | grep -c 'No such'", e2etest.AsRoot); out != "root-owned\n1\n" {
		t.Errorf("after restore: %q", out)
	}
	cmd, err := c.GetCommand(ctx, sb.ID, running.ID)
	for i := 0; err == nil && cmd.State == api.CommandRunning && i < 100; i++ {
		time.Sleep(100 * time.Millisecond)
		cmd, err = c.GetCommand(ctx, sb.ID, running.ID)
	}
	if err != nil || cmd.State == api.CommandRunning {
		t.Errorf("the command running at the restore: %s %v", cmd.State, err)
	}
	if l, err := c.ListCommands(ctx, sb.ID, 0, ""); err != nil || len(l.Items) < 4 {
		t.Errorf("history after restore: %d commands, %v", len(l.Items), err)
	}

	// Asleep: a snapshot of its save starts a new sandbox, and an asleep
	// sandbox can be restored too (it runs after).
	e2etest.MustOK(t, c, sb.ID, "echo v2 > /workspace/v2")
	if _, err := c.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(ctx, sb.ID, api.StateAsleep, time.Minute); err != nil {
		t.Fatal(err)
	}
	v2, err := c.CreateSnapshot(ctx, sb.ID, "v2")
	if err != nil {
		t.Fatal(err)
	}
	other := e2etest.Create(t, c, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceSnapshot, SnapshotID: "v2"}})
	if out := e2etest.MustOK(t, c, other.ID, "cat /workspace/v2 && stat -c %U:%G /workspace/v2 /workspace/data/f1"); out != "v2\nuser:user\nuser:user\n" {
		t.Errorf("sandbox on the asleep sandbox's snapshot: %q", out)
	}
	if other.Source == nil || other.Source.SnapshotID != v2.ID {
		t.Errorf("its source: %+v", other.Source)
	}
	if r, err := c.RestoreSandbox(ctx, sb.ID, snap.ID, true); err != nil || r.State != api.StateRunning {
		t.Fatalf("restore an asleep sandbox: %+v %v", r, err)
	}
	if out := e2etest.MustOK(t, c, sb.ID, "ls /workspace/v2 2>&1 | grep -c 'No such'"); out != "1\n" {
		t.Errorf("after restoring to ready: %q", out)
	}
	// A snapshot of a sandbox on a snapshot stacks on it.
	e2etest.MustOK(t, c, other.ID, "echo v3 > /workspace/v3")
	if _, err := c.CreateSnapshot(ctx, other.ID, "v3"); err != nil {
		t.Fatal(err)
	}
	third := e2etest.Create(t, c, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceSnapshot, SnapshotID: "v3"}})
	if out := e2etest.MustOK(t, c, third.ID, "cat /workspace/v2 /workspace/v3"); out != "v2\nv3\n" {
		t.Errorf("sandbox on v3: %q", out)
	}
	// A sandbox on a chain sleeps and wakes with its layers and its own
	// writes.
	e2etest.MustOK(t, c, third.ID, "echo own > /workspace/own && rm /workspace/v2")
	if _, err := c.SleepSandbox(ctx, third.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(ctx, third.ID, api.StateAsleep, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WakeSandbox(ctx, third.ID); err != nil {
		t.Fatal(err)
	}
	if sb, err := c.WaitSandbox(ctx, third.ID, api.StateRunning, time.Minute); err != nil || sb.State != api.StateRunning {
		t.Fatalf("wake on a chain: %+v %v", sb, err)
	}
	if out := e2etest.MustOK(t, c, third.ID, "cat /workspace/own /workspace/v3; ls /workspace/v2 2>&1 | grep -c 'No such'; stat -c %U /workspace/data/f1"); out != "own\nv3\n1\nuser\n" {
		t.Errorf("after a wake on a chain: %q", out)
	}
}

// TestDeleteAndTeams: a snapshot stood on answers 409 naming what stands
// on it and is deleted once they are gone; another team gets 404 for all
// of it.
func TestDeleteAndTeams(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--metrics-interval", "200ms"))
	c, ctx := s.Admin, t.Context()
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	e2etest.MustOK(t, c, sb.ID, "echo secret > /workspace/s")
	snap, err := c.CreateSnapshot(ctx, sb.ID, "base")
	if err != nil {
		t.Fatal(err)
	}
	// Charged as storage, listed in usage under its ID.
	var charged api.Usage
	for i := 0; i < 100 && charged.StorageGiBH == 0; i++ {
		time.Sleep(100 * time.Millisecond)
		r, err := c.Usage(ctx, cove.UsageQuery{GroupBy: "sandbox"})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range r.Items {
			if u.SandboxID == snap.ID {
				charged = u
			}
		}
	}
	if charged.StorageGiBH <= 0 || charged.CostUSD <= 0 || charged.CPUS != 0 {
		t.Errorf("the snapshot's usage: %+v", charged)
	}
	on := e2etest.Create(t, c, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceSnapshot, SnapshotID: snap.ID}})

	b := s.NewTeam("other")
	if _, err := b.GetSnapshot(ctx, snap.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("other team gets: %v", err)
	}
	if _, err := b.GetSnapshot(ctx, "base"); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("other team gets by name: %v", err)
	}
	if err := b.DeleteSnapshot(ctx, snap.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("other team deletes: %v", err)
	}
	if l, err := b.ListSnapshots(ctx, "", 0, ""); err != nil || len(l.Items) != 0 {
		t.Errorf("other team lists: %+v %v", l.Items, err)
	}
	if _, err := b.CreateSandbox(ctx, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceSnapshot, SnapshotID: snap.ID}}, false); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("other team starts on it: %v", err)
	}
	bsb := e2etest.Create(t, b, api.CreateSandboxRequest{})
	if _, err := b.RestoreSandbox(ctx, bsb.ID, snap.ID, false); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("other team restores to it: %v", err)
	}
	if _, err := b.CreateSnapshot(ctx, sb.ID, "theirs"); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("other team snapshots our sandbox: %v", err)
	}
	if _, err := b.ForkSandbox(ctx, sb.ID, api.ForkSandboxRequest{Count: 1}, false); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("other team forks our sandbox: %v", err)
	}

	err = c.DeleteSnapshot(ctx, "base")
	if api.ErrorCode(err) != api.CodeConflict || !strings.Contains(err.Error(), on.ID) {
		t.Fatalf("delete while %s stands on it: %v", on.ID, err)
	}
	// The raw answer is the API's error format with status 409.
	code, body, _ := e2etest.RawRequest(t, http.MethodDelete, s.URL+"/v1/snapshots/"+snap.ID, s.AdminKey, "")
	if code != http.StatusConflict || body.Error.Code != api.CodeConflict {
		t.Errorf("raw delete: %d %+v", code, body)
	}
	if _, err := c.TerminateSandbox(ctx, on.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(ctx, on.ID, api.StateTerminated, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSnapshot(ctx, "base"); err != nil {
		t.Fatalf("delete once nothing stands on it: %v", err)
	}
	if _, err := c.GetSnapshot(ctx, snap.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("get after delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.DataDir, "sandboxes", ".layers", snap.ID)); !os.IsNotExist(err) {
		t.Errorf("the layer stays after delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.DataDir, "saves", snap.ID)); !os.IsNotExist(err) {
		t.Errorf("the save stays after delete: %v", err)
	}
	// Bad input: one readable error each.
	for _, tc := range []struct {
		body string
		want api.Code
	}{
		{`{}`, api.CodeInvalidArgument},
		{`{"name": "Bad Name"}`, api.CodeInvalidArgument},
		{`{"name": "x", "extra": 1}`, api.CodeInvalidArgument},
	} {
		code, body, _ := e2etest.RawRequest(t, http.MethodPost, s.URL+"/v1/sandboxes/"+sb.ID+"/snapshots", s.AdminKey, tc.body)
		if body.Error.Code != tc.want || code != http.StatusBadRequest {
			t.Errorf("snapshot %s: %d %+v", tc.body, code, body)
		}
	}
}

// TestSnapshotSurvivesKill9: a snapshot made before `cove serve` is killed
// with SIGKILL is there after it starts again, and starts sandboxes.
func TestSnapshotSurvivesKill9(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	c, ctx := s.Admin, t.Context()
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	fill(t, c, sb.ID, 2)
	want := e2etest.MustOK(t, c, sb.ID, treeSum("/workspace"))
	snap, err := c.CreateSnapshot(ctx, sb.ID, "kept")
	if err != nil {
		t.Fatal(err)
	}
	s.Stop(syscall.SIGKILL)
	// The node's copy goes too: the sandbox on it is fetched from the
	// save store, as on another node of a fleet.
	layer := filepath.Join(s.DataDir, "sandboxes", ".layers", snap.ID)
	if err := unmountAll(filepath.Join(layer, "mnt")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(layer); err != nil {
		t.Fatal(err)
	}
	s.Start()
	got, err := c.GetSnapshot(ctx, snap.ID)
	if err != nil || got.Digest != snap.Digest || got.SizeBytes != snap.SizeBytes {
		t.Fatalf("after kill -9: %+v %v", got, err)
	}
	on := e2etest.Create(t, c, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceSnapshot, SnapshotID: "kept"}})
	if out := e2etest.MustOK(t, c, on.ID, treeSum("/workspace")); out != want {
		t.Errorf("tree on the snapshot after kill -9: %s, want %s", out, want)
	}
}

// unmountAll unmounts target until nothing is mounted there.
func unmountAll(target string) error {
	for range 10 {
		if err := syscall.Unmount(target, 0); err != nil {
			if err == syscall.EINVAL || err == syscall.ENOENT {
				return nil
			}
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	return nil
}

// TestRestoreSurvivesKill9 kills `cove serve` with SIGKILL in the middle
// of a restore (the sandbox waking, restoring to the snapshot), of a
// running sandbox and of an asleep one, and starts it again: the restore
// is finished, and the sandbox runs on the snapshot's files with nothing
// of its own left, its command of before lost.
func TestRestoreSurvivesKill9(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	c, ctx := s.Admin, t.Context()
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "crashy"})
	fill(t, c, sb.ID, 2)
	want := e2etest.MustOK(t, c, sb.ID, treeSum("/workspace"))
	snap, err := c.CreateSnapshot(ctx, sb.ID, "base")
	if err != nil {
		t.Fatal(err)
	}
	caught := map[bool]int{} // by whether the sandbox was asleep
	for round := 0; round < 20 && (caught[false] == 0 || caught[true] == 0); round++ {
		asleep := round%2 == 1
		e2etest.MustOK(t, c, sb.ID, "rm -rf /workspace/* && echo mine > /workspace/later")
		cmd, err := c.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "sleep 600"})
		if err != nil {
			t.Fatal(err)
		}
		if asleep {
			if _, err := c.SleepSandbox(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := c.WaitSandbox(ctx, sb.ID, api.StateAsleep, 2*time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.RestoreSandbox(ctx, sb.ID, snap.ID, true)
		}()
		// Killed once the restore is recorded and before it is finished.
		hit := false
	watch:
		for {
			select {
			case <-done:
				break watch
			default:
			}
			got, err := c.GetSandbox(ctx, sb.ID)
			if err == nil && got.State == api.StateWaking && strings.HasPrefix(got.StateReason, "restoring to snapshot "+snap.ID) {
				s.Stop(syscall.SIGKILL)
				hit = true
				break
			}
		}
		<-done
		if hit {
			caught[asleep]++
			s.Start()
		}
		got, err := c.WaitSandbox(ctx, sb.ID, api.StateRunning, 2*time.Minute)
		if err != nil || got.State != api.StateRunning {
			t.Fatalf("round %d (asleep %v, killed %v): the sandbox after the restore: %s %q %v", round, asleep, hit, got.State, got.StateReason, err)
		}
		if out := e2etest.MustOK(t, c, sb.ID, treeSum("/workspace")); out != want {
			t.Fatalf("round %d (asleep %v, killed %v): tree %s, want the snapshot's %s", round, asleep, hit, out, want)
		}
		if out := e2etest.MustOK(t, c, sb.ID, "ls /workspace/later 2>&1 | grep -c 'No such'"); out != "1\n" {
			t.Fatalf("round %d (asleep %v, killed %v): the sandbox's own file stays after the restore", round, asleep, hit)
		}
		if cm, err := c.GetCommand(ctx, sb.ID, cmd.ID); err != nil || cm.State != api.CommandLost {
			t.Errorf("round %d (asleep %v, killed %v): the command of before the restore: %s %v", round, asleep, hit, cm.State, err)
		}
	}
	t.Logf("restores killed in the middle: %d of running sandboxes, %d of asleep ones", caught[false], caught[true])
	if caught[false] == 0 || caught[true] == 0 {
		t.Fatalf("no kill landed in the middle of a restore of a running (%d) or an asleep (%d) sandbox in 20 rounds", caught[false], caught[true])
	}
}
