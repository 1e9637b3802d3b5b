// Package diskfull runs `cove serve` on a small data disk of its own: the
// node refuses new sandboxes it has no room for, with a clear error, and
// the sandboxes it admitted can fill their disks without losing a write;
// when another process fills the disk, calls answer with clear codes and
// succeed again once room is freed.
package diskfull

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestFullDataDisk(t *testing.T) {
	mnt := e2etest.SmallDisk(t, 768)
	s := e2etest.StartServer(t, e2etest.WithDataDir(filepath.Join(mnt, "data")),
		e2etest.WithArgs("--warm-pool", "0", "--disk-overcommit", "1", "--disk-reserve-mib", "64"))
	c := s.Admin
	disk := int64(128)
	var admitted []api.Sandbox
	var refusal error
	for len(admitted) < 20 {
		sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: &disk}}, true)
		if err != nil {
			refusal = err
			break
		}
		if sb.State != api.StateRunning {
			t.Fatalf("sandbox %s is %s (%s)", sb.ID, sb.State, sb.StateReason)
		}
		admitted = append(admitted, sb)
	}
	if refusal == nil || len(admitted) == 0 {
		t.Fatalf("%d sandboxes of %d MiB on a 768 MiB data disk, refusal %v", len(admitted), disk, refusal)
	}
	if api.ErrorCode(refusal) != api.CodeResourceExhausted || !strings.Contains(refusal.Error(), "cannot hold another 128 MiB disk") {
		t.Fatalf("refusal = %v; want resource_exhausted saying why", refusal)
	}
	t.Logf("admitted %d sandboxes of %d MiB, then: %v", len(admitted), disk, refusal)

	// Every admitted sandbox fills its disk; every acknowledged write reads
	// back whole.
	sums := map[string]string{}
	for _, sb := range admitted {
		out := e2etest.MustOK(t, c, sb.ID, "dd if=/dev/urandom of=/workspace/big bs=1M count=96 2>/dev/null && sync && md5sum /workspace/big")
		sums[sb.ID] = strings.Fields(out)[0]
	}
	for _, sb := range admitted {
		out := e2etest.MustOK(t, c, sb.ID, "md5sum /workspace/big")
		if got := strings.Fields(out)[0]; got != sums[sb.ID] {
			t.Errorf("sandbox %s reads back %s, wrote %s", sb.ID, got, sums[sb.ID])
		}
	}
	// Still refused, and the API still answers (its database writes work).
	if _, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: &disk}}, false); api.ErrorCode(err) != api.CodeResourceExhausted {
		t.Fatalf("create on a full node: %v", err)
	}
	// Room comes back when a sandbox ends.
	if _, err := c.TerminateSandbox(t.Context(), admitted[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(t.Context(), admitted[0].ID, api.StateTerminated, 0); err != nil {
		t.Fatal(err)
	}
	e2etest.Create(t, c, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: &disk}})
}

// TestNodeDiskFilledFromOutside: another process fills the node's data
// disk. Calls that need room on it answer with a clear code naming the
// disk, never 500 internal, and keep nothing half-done; /readyz fails its
// disk check; once the room is freed the same calls succeed. Run with the
// database on the data disk (the default: its writes fail first) and on
// another disk (the node's own writes fail: the command's output log, the
// sandbox's disk file).
func TestNodeDiskFilledFromOutside(t *testing.T) {
	for _, tc := range []struct {
		name      string
		elsewhere bool // the database on another disk
	}{
		{"database on the data disk", false},
		{"database elsewhere", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt := e2etest.SmallDisk(t, 1024)
			args := []string{"--warm-pool", "0", "--disk-overcommit", "1", "--disk-reserve-mib", "64"}
			if tc.elsewhere {
				args = append(args, "--store", "sqlite:"+filepath.Join(t.TempDir(), "cove.db"))
			}
			s := e2etest.StartServer(t, e2etest.WithDataDir(filepath.Join(mnt, "data")), e2etest.WithArgs(args...))
			filledFromOutside(t, s, mnt)
		})
	}
}

func filledFromOutside(t *testing.T, s *e2etest.Server, mnt string) {
	ctx := t.Context()
	// One attempt per call: each answer is seen as it is.
	c := cove.NewClient(cove.WithBaseURL(s.URL), cove.WithAPIKey(s.AdminKey), cove.WithRetry(cove.RetryPolicy{Attempts: 1}))
	disk := int64(128)
	create := api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: &disk}}
	sb := e2etest.Create(t, c, create)
	e2etest.MustOK(t, c, sb.ID, "echo hi")
	if _, err := c.WriteFile(ctx, sb.ID, "/workspace/kept", strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	if code, _, body := e2etest.RawRequest(t, "GET", s.URL+"/readyz", "", ""); code != http.StatusOK {
		t.Fatalf("readyz before the disk fills: %d %s", code, body)
	}
	// A command that runs on: what it prints while the disk is full is
	// recorded once there is room, whole and in order.
	cat, err := c.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "cat", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox's disk is a sparse file on the data disk: what its ext4
	// still has to write back when the data disk fills can abort its
	// journal and leave it read-only (the kernel's "critical space
	// allocation error"). Nothing is left to write back: the agent's log
	// on that disk has its lines of the commands above (a command's start
	// is logged before its exec is answered, its end before its exit is
	// published), and the host writes them out here. A sync run in the
	// sandbox would not do: the agent logs its end after it.
	syscall.Sync()

	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	t.Cleanup(func() { os.Remove(filler) })
	full := "the node's data disk (" + s.DataDir + ") is full"

	// Readiness names the disk.
	code, _, body := e2etest.RawRequest(t, "GET", s.URL+"/readyz", "", "")
	var ready struct {
		Failing []string `json:"failing"`
	}
	json.Unmarshal(body, &ready)
	if code != http.StatusServiceUnavailable || !slices.Contains(ready.Failing, "disk") {
		t.Fatalf("readyz on a full disk: %d %s; want 503 failing disk", code, body)
	}

	// The running command prints 256 KiB that have no room on the disk:
	// the recorder fails and keeps trying.
	printed := make([]byte, 256<<10)
	for i := range printed {
		printed[i] = 'a' + byte(i%26)
	}
	if err := c.Stdin(ctx, sb.ID, cat.ID, bytes.NewReader(printed), false); err != nil {
		t.Fatalf("stdin while the disk is full: %v", err)
	}
	for !recorderMetFullDisk(s.Tail(1 << 20)) {
		if ctx.Err() != nil {
			t.Fatal("the recorder never met the full disk")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A command: 507, with and without an Idempotency-Key.
	wantFull := func(what string, err error, status int, code api.Code, says string) {
		t.Helper()
		t.Logf("%s: %v", what, err)
		var e *cove.Error
		if !errors.As(err, &e) || e.Status != status || e.Code != code || !strings.Contains(e.Message, says) {
			t.Fatalf("%s on a full data disk: %v; want %d %s saying %q", what, err, status, code, says)
		}
	}
	_, err = c.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "echo full"})
	wantFull("exec", err, http.StatusInsufficientStorage, api.CodeInsufficientStorage, full)
	st, er, body := e2etest.RawRequest(t, "POST", s.URL+"/v1/sandboxes/"+sb.ID+"/commands", s.AdminKey, `{"command":"echo full"}`)
	if st != http.StatusInsufficientStorage || er.Error == nil || er.Error.Code != api.CodeInsufficientStorage || !strings.Contains(er.Error.Message, full) {
		t.Fatalf("POST commands without a key on a full data disk: %d %s", st, body)
	}
	// A file write: 507; the old content stays.
	_, err = c.WriteFile(ctx, sb.ID, "/workspace/kept", strings.NewReader(strings.Repeat("new", 1<<20)))
	wantFull("a file write", err, http.StatusInsufficientStorage, api.CodeInsufficientStorage, full)
	// A create: 429, as admission refuses.
	_, err = c.CreateSandbox(ctx, create, false)
	wantFull("a create", err, http.StatusTooManyRequests, api.CodeResourceExhausted, "data disk")

	// Room again: the same calls succeed, and nothing was left half-done.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, _, body := e2etest.RawRequest(t, "GET", s.URL+"/readyz", "", ""); code != http.StatusOK {
		t.Fatalf("readyz once room is freed: %d %s", code, body)
	}
	if got := readFile(t, c, sb.ID, "/workspace/kept"); got != "old" {
		t.Fatalf("after a refused write the file holds %d bytes %.20q; want the old content", len(got), got)
	}
	if err := c.Stdin(ctx, sb.ID, cat.ID, nil, true); err != nil {
		t.Fatal(err)
	}
	var recorded bytes.Buffer
	if err := c.Output(ctx, sb.ID, cat.ID, 0, true, func(r api.OutputRecord) error {
		if r.Stream == "stdout" {
			recorded.Write(r.Data)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(recorded.Bytes(), printed) {
		t.Fatalf("the output printed while the disk was full was recorded as %d bytes; want the %d printed, in order", recorded.Len(), len(printed))
	}
	// A command's exit reaches its output log just before the store, and
	// an exit the full disk held up reaches the store once there is room:
	// wait until the store has every command ended.
	var cmds api.List[api.Command]
	for deadline := time.Now().Add(time.Minute); ; {
		var err error
		if cmds, err = c.ListCommands(ctx, sb.ID, 100, ""); err != nil {
			t.Fatal(err)
		}
		running := slices.IndexFunc(cmds.Items, func(cm api.Command) bool { return !cm.State.Done() })
		if running < 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("command %s is %s a minute after the disk had room again", cmds.Items[running].ID, cmds.Items[running].State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The commands that were refused left no record and no output log.
	var ids []string
	for _, cmd := range cmds.Items {
		if cmd.State != api.CommandExited {
			t.Errorf("command %s is %s after the disk had room again", cmd.ID, cmd.State)
		}
		ids = append(ids, cmd.ID)
	}
	if len(ids) != 2 {
		t.Fatalf("commands %v; want the two that ran (echo, cat)", ids)
	}
	logs, err := os.ReadDir(filepath.Join(s.DataDir, "output", sb.ID))
	if err != nil {
		t.Fatal(err)
	}
	// A log is <command>.index with a file per stream that wrote.
	var logged, names []string
	for _, l := range logs {
		names = append(names, l.Name())
		if id, ok := strings.CutSuffix(l.Name(), ".index"); ok {
			logged = append(logged, id)
		}
	}
	slices.Sort(ids)
	slices.Sort(logged)
	if !slices.Equal(logged, ids) {
		t.Fatalf("output logs %v (files %v); want only those of the commands %v", logged, names, ids)
	}
	for _, name := range names {
		id, _, _ := strings.Cut(name, ".")
		if !slices.Contains(ids, id) {
			t.Errorf("output file %s: of no command that ran", name)
		}
	}
	if out := e2etest.MustOK(t, c, sb.ID, "echo back"); out != "back\n" {
		t.Fatalf("a command once room is freed printed %q", out)
	}
	if _, err := c.WriteFile(ctx, sb.ID, "/workspace/kept", strings.NewReader("new")); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, c, sb.ID, "/workspace/kept"); got != "new" {
		t.Fatalf("a file written once room is freed reads %q", got)
	}
	e2etest.Create(t, c, create)
}

// recorderMetFullDisk reports whether the server's log shows a command's
// output recorder failing on the full disk (it retries).
func recorderMetFullDisk(log string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "output stream broke") && strings.Contains(line, "no space left on device") {
			return true
		}
	}
	return false
}

// readFile is a sandbox file's content.
func readFile(t *testing.T, c *cove.Client, ref, path string) string {
	t.Helper()
	var b strings.Builder
	if _, err := c.DownloadFile(t.Context(), ref, path, &b); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b.String()
}

// fill writes path until the filesystem it is on has no room left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for _, n := range []int{1 << 20, 4096, 512, 1} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("filling %s: %v", path, err)
				}
				break
			}
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
}
