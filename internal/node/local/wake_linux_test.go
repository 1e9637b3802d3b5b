package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fsspread"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/image"
	"github.com/cove-dev/cove/internal/node/runtime"
	"github.com/cove-dev/cove/internal/node/saves"
	"github.com/cove-dev/cove/internal/testsupport/s3server"
)

// Shared by the root tests; set by setupRoot.
var (
	rootDir    string      // per-run directory, searchable by mapped roots
	rootAgent  string      // static cove-agent built for this run
	rootImage  image.Image // busybox image
	rootCgroup string      // per-run cgroup parent
	rootErr    error       // why the root tests cannot run
)

// setupRoot builds the agent and a busybox image for the root tests, or
// notes why they cannot run; what it returns removes what it made.
func setupRoot() func() {
	if os.Geteuid() != 0 {
		rootErr = errors.New("needs root (runc, mounts, loop devices, cgroups)")
		return func() {}
	}
	if _, err := exec.LookPath("runc"); err != nil {
		rootErr = fmt.Errorf("needs runc: %w", err)
		return func() {}
	}
	dir, err := os.MkdirTemp("", "cove-local-test-")
	if err != nil {
		rootErr = err
		return func() {}
	}
	rootDir = dir
	var b [4]byte
	rand.Read(b[:])
	rootCgroup = "/cove-local-test-" + hex.EncodeToString(b[:])
	cleanup := func() {
		os.RemoveAll(dir)
		// The sandboxes' cgroups normally went with them, but one whose
		// last process is still being reaped can linger a moment: every
		// cgroup under the parent is removed, children first, for a while.
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + rootCgroup)
		if d := "/sys/fs/cgroup" + rootCgroup; fileExists(d) {
			dirs = append(dirs, d)
		}
		for range 50 {
			left := 0
			for _, d := range dirs {
				var tree []string
				filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
					if err == nil && e.IsDir() {
						tree = append(tree, p)
					}
					return nil
				})
				for i := len(tree) - 1; i >= 0; i-- {
					if os.Remove(tree[i]) != nil && fileExists(tree[i]) {
						left++
					}
				}
			}
			if left == 0 {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		fmt.Fprintf(os.Stderr, "cgroups under %s are still there\n", rootCgroup)
	}
	rootErr = func() error {
		if err := os.Chmod(dir, 0o711); err != nil {
			return err
		}
		rootAgent = filepath.Join(dir, "cove-agent")
		build := exec.Command("go", "build", "-o", rootAgent, "github.com/cove-dev/cove/cmd/cove-agent")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("build cove-agent: %w: %s", err, out)
		}
		if _, err := os.Stat(image.BusyboxPath); err != nil {
			return fmt.Errorf("needs busybox-static: %w", err)
		}
		rootImage, err = image.BuildBusybox(context.Background(), filepath.Join(dir, "images"), "busybox")
		return err
	}()
	return cleanup
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// exits collects the commands' exits a node reports.
type exits chan string

func (e exits) onExit(sandboxID, commandID string, exit node.Exit, lost bool) {
	e <- fmt.Sprintf("%s/%s exit %d lost %v", sandboxID, commandID, exit.ExitCode, lost)
}

// testNode is a node of its own (state, runc root and output dirs) over
// the given save store, closed when the test ends.
func testNode(t *testing.T, name string, st saves.Store, gen func() string) (*Node, exits) {
	t.Helper()
	base, err := os.MkdirTemp(rootDir, name+"-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o711)
	t.Cleanup(func() { os.RemoveAll(base) })
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", name)
	rt, err := runtime.New(runtime.Config{
		StateDir: filepath.Join(base, "sandboxes"), AgentPath: rootAgent, CgroupParent: rootCgroup,
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	ex := make(exits, 16)
	n := New(Config{
		Templates: map[string]image.Image{"busybox": rootImage},
		OutputDir: filepath.Join(base, "output"), OutputMaxBytes: 1 << 20,
		Saves: st, Generation: gen,
	}, rt, log, ex.onExit)
	t.Cleanup(func() { n.Close() })
	return n, ex
}

// run starts a command and waits for its exit.
func runCmd(t *testing.T, n *Node, ex exits, sbx, cmd, script string) {
	t.Helper()
	_, err := n.Exec(t.Context(), sbx, node.ExecSpec{
		ID: cmd, Template: "busybox", Argv: []string{"/bin/sh", "-c", script}, Cwd: "/",
		Env: map[string]string{"PATH": "/bin:/usr/bin:/sbin:/usr/sbin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ex:
		if want := sbx + "/" + cmd + " exit 0 lost false"; got != want {
			t.Fatalf("exit %q, want %q", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("command %s did not end", cmd)
	}
}

// replay is everything a reader of a command's recorded output sees.
func replay(t *testing.T, n *Node, sbx, cmd string) string {
	t.Helper()
	o, err := n.Output(sbx, cmd)
	if err != nil {
		t.Fatalf("output of %s: %v", cmd, err)
	}
	defer o.Close()
	var b bytes.Buffer
	exit, err := o.Read(t.Context(), 0, false, func(c node.Chunk) error {
		fmt.Fprintf(&b, "%d %s %v %q\n", c.Seq, c.Stream, c.Truncated, c.Data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "exit %+v\n", exit)
	for _, s := range []string{"stdout", "stderr"} {
		r, size, err := o.Stream(s)
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]byte, size)
		r.ReadAt(raw, 0)
		fmt.Fprintf(&b, "%s %q\n", s, raw)
	}
	return b.String()
}

// TestWakeOnAnotherNode: a sandbox that slept on node A wakes on node B
// (another output dir, the same S3 store) from the generation A wrote,
// with its files, and every command it ran on A replays on B
// byte-identical; woken back on A from B's save, B's commands replay there.
func TestWakeOnAnotherNode(t *testing.T) {
	if rootErr != nil {
		t.Skip(rootErr)
	}
	srv := s3server.Start(t)
	srv.Env(t)
	open := func() saves.Store {
		st, err := saves.Open(t.Context(), srv.URL(), "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	a, exA := testNode(t, "a", open(), func() string { return saves.Generation(3, time.Now()) })
	b, exB := testNode(t, "b", open(), func() string { return saves.Generation(7, time.Now()) })
	ctx := t.Context()
	id := fmt.Sprintf("sbx-wake-%d", time.Now().UnixNano())
	spec := node.SandboxSpec{
		ID: id, Hostname: "wake", Template: "busybox", Pids: 256,
		Resources: api.Resources{CPUs: 1, MemoryMiB: 256, DiskMiB: 64},
	}
	if err := a.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Destroy(context.Background(), id)
		b.Destroy(context.Background(), id)
	})
	runCmd(t, a, exA, id, "cmd_files", "head -c 3000000 /dev/urandom > /data.bin && sha256sum /data.bin > /data.sum")
	runCmd(t, a, exA, id, "cmd_out", "echo hello; echo oops >&2; i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done; printf 'no newline'")
	runCmd(t, a, exA, id, "cmd_sum", "cat /data.sum")
	want := map[string]string{}
	for _, cmd := range []string{"cmd_files", "cmd_out", "cmd_sum"} {
		want[cmd] = replay(t, a, id, cmd)
	}

	info, err := a.FinishSleep(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Generation) < 3 || info.Generation[:2] != "3-" {
		t.Fatalf("the sleep's generation %q is not named by node A's hook", info.Generation)
	}
	// A later save of the same sandbox (elsewhere) must not be what B
	// restores when asked for A's.
	if _, err := open().Save(ctx, id, saves.Generation(9, time.Now().Add(time.Hour)), saves.Files{Disk: emptyDisk(t)}); err != nil {
		t.Fatal(err)
	}

	spec.Save = info.Generation
	if err := b.Wake(ctx, spec); err != nil {
		t.Fatal(err)
	}
	for cmd, w := range want {
		if got := replay(t, b, id, cmd); got != w {
			t.Errorf("%s replays on B as\n%s\nwant\n%s", cmd, trim(got), trim(w))
		}
	}
	runCmd(t, b, exB, id, "cmd_check", "sha256sum -c /data.sum")
	if got := replay(t, b, id, "cmd_check"); !bytes.Contains([]byte(got), []byte("/data.bin: OK")) {
		t.Errorf("the disk after the wake: %s", got)
	}
	// B's own sleep names B's generation and holds all four commands.
	info2, err := b.FinishSleep(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if info2.Generation[:2] != "7-" {
		t.Errorf("B's generation %q", info2.Generation)
	}
	// Back on A, whose output of the sandbox is the older save's: the
	// newer save's output replaces it, B's command included.
	want["cmd_check"] = replay(t, b, id, "cmd_check")
	spec.Save = info2.Generation
	if err := a.Wake(ctx, spec); err != nil {
		t.Fatal(err)
	}
	for cmd, w := range want {
		if got := replay(t, a, id, cmd); got != w {
			t.Errorf("%s replays back on A as\n%s\nwant\n%s", cmd, trim(got), trim(w))
		}
	}
}

func emptyDisk(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "empty.img")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Truncate(p, 1<<20)
	return p
}

func trim(s string) string {
	if len(s) > 600 {
		return s[:300] + " … " + s[len(s)-300:]
	}
	return s
}

// dirNode is a node of its own (testNode) over a save store in a
// directory.
func dirNode(t *testing.T, name string) (*Node, exits) {
	t.Helper()
	st, err := saves.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return testNode(t, name, st, nil)
}

// busyboxSpec is a small busybox sandbox named for the test.
func busyboxSpec(name string) node.SandboxSpec {
	return node.SandboxSpec{
		ID: fmt.Sprintf("sbx-%s-%d", name, time.Now().UnixNano()), Hostname: name, Template: "busybox", Pids: 256,
		Resources: api.Resources{CPUs: 1, MemoryMiB: 256, DiskMiB: 64},
	}
}

// startSandbox starts spec on n, destroyed when the test ends.
func startSandbox(t *testing.T, n *Node, spec node.SandboxSpec) {
	t.Helper()
	if err := n.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Destroy(context.Background(), spec.ID) })
}

// TestFinishSleepAfterRemovalCutShort: a crash while the runtime was
// removed after a complete save leaves a state directory without its disk
// image. The sleep's completion finds the save, removes what is left, and
// the sandbox wakes with its files.
func TestFinishSleepAfterRemovalCutShort(t *testing.T) {
	if rootErr != nil {
		t.Skip(rootErr)
	}
	n, ex := dirNode(t, "cut")
	ctx := t.Context()
	spec := busyboxSpec("cut")
	id := spec.ID
	startSandbox(t, n, spec)
	runCmd(t, n, ex, id, "cmd_w", "echo kept > /kept")
	info, err := n.FinishSleep(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// What os.RemoveAll of the state directory leaves when it is stopped
	// after the disk image went.
	dir := n.rt.StateDir(id)
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := n.FinishSleep(ctx, id)
	if err != nil {
		t.Fatalf("finishing the sleep again: %v", err)
	}
	if again.Generation != info.Generation {
		t.Errorf("generation %q, want the save's %q", again.Generation, info.Generation)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the state directory is still there: %v", err)
	}
	if err := n.Wake(ctx, spec); err != nil {
		t.Fatal(err)
	}
	runCmd(t, n, ex, id, "cmd_r", "grep -q kept /kept")
}

// TestDestroyKeepsLogFilesAsSpares: a destroyed sandbox's logs become the
// node's spare files, and the next sandbox's commands record into them,
// reading back only their own output.
func TestDestroyKeepsLogFilesAsSpares(t *testing.T) {
	if rootErr != nil {
		t.Skip(rootErr)
	}
	n, ex := dirNode(t, "spare")
	a := busyboxSpec("spare-a")
	first := a.ID
	startSandbox(t, n, a)
	runCmd(t, n, ex, first, "cmd_1", "echo first-secret; echo first-err >&2")
	runCmd(t, n, ex, first, "cmd_2", "echo again")
	before := n.spares.Len()
	if err := n.Destroy(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	// cmd_1: index, stdout, stderr; cmd_2: index, stdout.
	if got := n.spares.Len() - before; got != 5 {
		t.Fatalf("the destroy kept %d spares, want 5", got)
	}
	b := busyboxSpec("spare-b")
	second := b.ID
	startSandbox(t, n, b)
	runCmd(t, n, ex, second, "cmd_1", "echo mine")
	if got := n.spares.Len() - before; got != 3 {
		t.Errorf("%d spares left after a command recorded its index and stdout, want 3", got)
	}
	if got, want := replay(t, n, second, "cmd_1"), `1 stdout false "mine\n"`; !strings.HasPrefix(got, want) || strings.Contains(got, "first") {
		t.Errorf("the new command replays\n%s\nwant only its own output", got)
	}
}

// TestSandboxDirsSpread: the directories that hold a directory per
// sandbox (state, runc's record, recorded output) are marked to spread
// those over the filesystem, where it takes the mark.
func TestSandboxDirsSpread(t *testing.T) {
	if rootErr != nil {
		t.Skip(rootErr)
	}
	n, ex := dirNode(t, "spread")
	spec := busyboxSpec("spread")
	startSandbox(t, n, spec)
	runCmd(t, n, ex, spec.ID, "cmd_1", "true")
	state := n.rt.StateDir("")
	if err := fsspread.Subdirs(t.TempDir()); errors.Is(err, fsspread.ErrUnsupported) {
		t.Skipf("the test's filesystem: %v", err)
	}
	for _, dir := range []string{state, filepath.Join(filepath.Dir(filepath.Clean(state)), "runc"), n.cfg.OutputDir} {
		if ok, err := fsspread.Spread(dir); err != nil || !ok {
			t.Errorf("%s: spread %v, %v; want marked", dir, ok, err)
		}
	}
}

// TestStartMakesOutputDir: a started sandbox has its output directory
// before any command runs, so its first command does not make it.
func TestStartMakesOutputDir(t *testing.T) {
	if rootErr != nil {
		t.Skip(rootErr)
	}
	n, _ := dirNode(t, "outdir")
	spec := busyboxSpec("outdir")
	startSandbox(t, n, spec)
	if fi, err := os.Stat(n.outputDir(spec.ID)); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the output directory of a started sandbox: %v, %v; want a directory of mode 0700", fi, err)
	}
}
