// Package fleet tests cove past one machine: a `cove control` and several
// `cove node` processes on this host, each node with its own data dir,
// nftables table, subnet, ports and cgroup parent, saves in a real S3
// server (versitygw) on loopback. Sandboxes are placed across the nodes,
// sleep on one and wake on another, and survive a node's loss.
package fleet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func ptr[T any](v T) *T { return &v }

// nodeOf is the name of the node the control plane placed a sandbox on, as
// the admin sees it.
func nodeOf(t *testing.T, f *e2etest.Fleet, id string) string {
	t.Helper()
	code, _, body := e2etest.RawRequest(t, "GET", f.Control.URL+"/v1/sandboxes/"+id, f.Control.AdminKey, "")
	if code != 200 {
		t.Fatalf("GET sandbox %s: %d %s", id, code, body)
	}
	var sb struct {
		Node *struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"node"`
	}
	if err := json.Unmarshal(body, &sb); err != nil {
		t.Fatal(err)
	}
	if sb.Node == nil {
		return ""
	}
	return sb.Node.Name
}

func admin(t *testing.T, f *e2etest.Fleet, method, path string) {
	t.Helper()
	code, _, body := e2etest.RawRequest(t, method, f.Control.URL+path, f.Control.AdminKey, "")
	if code/100 != 2 {
		t.Fatalf("%s %s: %d %s", method, path, code, body)
	}
}

func wait(t *testing.T, c *cove.Client, id string, state api.SandboxState) api.Sandbox {
	t.Helper()
	sb, err := c.WaitSandbox(context.Background(), id, state, 2*time.Minute)
	if err != nil {
		t.Fatalf("sandbox %s: want %s: %v", id, state, err)
	}
	return sb
}

// TestPlacement: concurrent creates spread across two nodes and never go
// over a node's capacity; a drained node takes none; the admin sees
// where a sandbox runs and another team does not.
func TestPlacement(t *testing.T) {
	f := e2etest.StartFleet(t,
		e2etest.FleetControlArgs("--cpu-overcommit", "1", "--memory-overcommit", "1", "--warm-pool", "0"),
		e2etest.FleetNodeArgs("--cpus", "12", "--memory-mib", "16384"))
	c := f.Control.Admin
	ctx := context.Background()
	one := &api.ResourcesRequest{CPUs: ptr(1.0), MemoryMiB: ptr(int64(256)), DiskMiB: ptr(int64(64))}

	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("p%d", i), Resources: one}, true)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			ids = append(ids, sb.ID)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
	count := map[string]int{}
	for _, id := range ids {
		count[nodeOf(t, f, id)]++
	}
	if count["node-a"]+count["node-b"] != 20 || count["node-a"] > 12 || count["node-b"] > 12 || count["node-a"] < 8 || count["node-b"] < 8 {
		t.Fatalf("placement of 20 one-CPU sandboxes over two 12-CPU nodes: %v", count)
	}
	for _, n := range f.ListNodes() {
		if n.Sandboxes != count[n.Name] {
			t.Errorf("node %s lists %d sandboxes, %d placed there", n.Name, n.Sandboxes, count[n.Name])
		}
	}
	// Four more fill both nodes to their 24 CPUs; the next is refused.
	for i := range 24 - 20 {
		if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("fill%d", i), Resources: one}, false); err != nil {
			t.Fatalf("create within capacity: %v", err)
		}
	}
	_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "over", Resources: one}, false)
	if api.ErrorCode(err) != api.CodeResourceExhausted {
		t.Fatalf("a create over every node's capacity: %v, want resource_exhausted", err)
	}

	// A drained node keeps its sandboxes and takes no new one.
	admin(t, f, "POST", "/v1/nodes/node-a/drain")
	f.WaitNode("node-a", "draining")
	var freed int
	for _, id := range ids {
		if freed < 3 && nodeOf(t, f, id) == "node-a" {
			if _, err := c.TerminateSandbox(ctx, id); err != nil {
				t.Fatal(err)
			}
			wait(t, c, id, api.StateTerminated)
			freed++
		}
	}
	for i := range 3 {
		_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("drained%d", i), Resources: one}, false)
		if api.ErrorCode(err) != api.CodeResourceExhausted {
			t.Fatalf("create with room only on a draining node: %v, want resource_exhausted", err)
		}
	}
	admin(t, f, "POST", "/v1/nodes/node-a/undrain")
	f.WaitNode("node-a", "ready")
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "undrained", Resources: one}, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeOf(t, f, sb.ID); got != "node-a" {
		t.Fatalf("after undrain the only room is on node-a; placed on %q", got)
	}

	// Another team sees no node.
	other := f.Control.NewTeam("placement-other")
	osb, err := other.CreateSandbox(ctx, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{CPUs: ptr(0.1), MemoryMiB: ptr(int64(64)), DiskMiB: ptr(int64(64))}}, false)
	if err != nil && !strings.Contains(err.Error(), "resource_exhausted") {
		t.Fatal(err)
	}
	if err == nil {
		code, _, body := e2etest.RawRequest(t, "GET", f.Control.URL+"/v1/sandboxes/"+osb.ID, f.Control.Keys()[1], "")
		if code != 200 || bytes.Contains(body, []byte(`"node"`)) {
			t.Fatalf("another team's view of its sandbox: %d %s", code, body)
		}
	}
	code, e, _ := e2etest.RawRequest(t, "GET", f.Control.URL+"/v1/nodes", f.Control.Keys()[1], "")
	if code != 403 || e.Error.Code != api.CodePermissionDenied {
		t.Fatalf("GET /v1/nodes with a team's key: %d %+v", code, e)
	}
}

// history runs a few commands and returns their IDs and every byte of
// their recorded output.
func history(t *testing.T, c *cove.Client, id string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, cmd := range []string{
		"echo one; echo two >&2; echo three",
		"seq 1 2000",
		"head -c 3000 /dev/urandom | od -An -tx1 | head -50",
	} {
		r, err := c.ExecWait(context.Background(), id, api.CreateCommandRequest{Command: cmd})
		if err != nil {
			t.Fatal(err)
		}
		out[r.Command.ID] = replay(t, c, id, r.Command.ID)
		if len(out[r.Command.ID]) == 0 {
			t.Fatalf("command %q recorded nothing", cmd)
		}
	}
	return out
}

// replay is the whole recorded output of a command: every record, in
// order, as JSON lines.
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

// TestWakeElsewhere: a sandbox sleeps on one node, that node is drained,
// and it wakes on the other with byte-identical files and every earlier
// command's output replaying identically.
func TestWakeElsewhere(t *testing.T) {
	f := e2etest.StartFleet(t)
	c := f.Control.Admin
	ctx := context.Background()
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "wanderer"})
	home := nodeOf(t, f, sb.ID)
	if home == "" {
		t.Fatal("the admin sees no node on a running sandbox")
	}
	e2etest.MustOK(t, c, sb.ID, "head -c 10485760 /dev/urandom > /workspace/big && mkdir -p /workspace/d && echo hi > /workspace/d/f")
	sum := sha(t, c, sb.ID, "/workspace/big")
	outputs := history(t, c, sb.ID)

	if _, err := c.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, sb.ID, api.StateAsleep)
	admin(t, f, "POST", "/v1/nodes/"+home+"/drain")
	if _, err := c.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, sb.ID, api.StateRunning)
	if got := nodeOf(t, f, sb.ID); got == home || got == "" {
		t.Fatalf("woke on %q; its home %s is draining", got, home)
	}
	if got := sha(t, c, sb.ID, "/workspace/big"); got != sum {
		t.Fatalf("the 10 MiB file after a wake elsewhere: sha-256 %s, want %s", got, sum)
	}
	if got := e2etest.MustOK(t, c, sb.ID, "cat /workspace/d/f"); got != "hi\n" {
		t.Fatalf("small file: %q", got)
	}
	for id, want := range outputs {
		if got := replay(t, c, sb.ID, id); !bytes.Equal(got, want) {
			t.Fatalf("command %s replays differently after the wake elsewhere:\n got %q\nwant %q", id, got, want)
		}
	}
	// The sandbox goes on working where it is.
	if got := e2etest.MustOK(t, c, sb.ID, "echo again"); got != "again\n" {
		t.Fatalf("exec after the wake: %q", got)
	}
}

// TestNodeLoss: a node is killed with its sandboxes. Its sandbox with a
// save becomes asleep and wakes on the other node with exactly the saved
// files; the one without becomes failed (node_lost) and its running
// command lost.
func TestNodeLoss(t *testing.T) {
	f := e2etest.StartFleet(t)
	c := f.Control.Admin
	ctx := context.Background()
	// Everything starts on node-a.
	admin(t, f, "POST", "/v1/nodes/node-b/drain")
	saved := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "saved"})
	e2etest.MustOK(t, c, saved.ID, "echo before > /workspace/saved.txt")
	if _, err := c.SleepSandbox(ctx, saved.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, saved.ID, api.StateAsleep)
	if _, err := c.WakeSandbox(ctx, saved.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, saved.ID, api.StateRunning)
	// Written after the save: lost with the node.
	e2etest.MustOK(t, c, saved.ID, "echo after > /workspace/unsaved.txt")
	unsaved := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "unsaved"})
	running, err := c.Exec(ctx, unsaved.ID, api.CreateCommandRequest{Command: "sleep 1000"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{saved.ID, unsaved.ID} {
		if got := nodeOf(t, f, id); got != "node-a" {
			t.Fatalf("sandbox %s on %q, want node-a (node-b drains)", id, got)
		}
	}
	admin(t, f, "POST", "/v1/nodes/node-b/undrain")

	a := f.Node("node-a")
	a.Stop(syscall.SIGKILL)
	a.KillSandboxes()
	f.WaitNode("node-a", "lost")

	sb := wait(t, c, saved.ID, api.StateAsleep)
	if !strings.Contains(sb.StateReason, "node-a") || !strings.Contains(sb.StateReason, "lost") {
		t.Errorf("state_reason of the saved sandbox: %q", sb.StateReason)
	}
	sb = wait(t, c, unsaved.ID, api.StateFailed)
	if !strings.HasPrefix(sb.StateReason, "node_lost") {
		t.Errorf("state_reason of the unsaved sandbox: %q, want node_lost…", sb.StateReason)
	}
	cmd, err := c.GetCommand(ctx, unsaved.ID, running.ID)
	if err != nil || cmd.State != api.CommandLost {
		t.Errorf("its running command: %+v %v, want lost", cmd.State, err)
	}

	if _, err := c.WakeSandbox(ctx, saved.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, saved.ID, api.StateRunning)
	if got := nodeOf(t, f, saved.ID); got != "node-b" {
		t.Fatalf("woke on %q, want node-b", got)
	}
	if got := e2etest.MustOK(t, c, saved.ID, "cat /workspace/saved.txt; ls /workspace"); got != "before\nsaved.txt\n" {
		t.Fatalf("files after waking from the last save: %q", got)
	}
	events, err := c.Events(ctx, cove.EventQuery{Sandbox: unsaved.ID})
	if err != nil {
		t.Fatal(err)
	}
	var failed bool
	for _, e := range events.Items {
		failed = failed || e.Type == "sandbox.failed"
	}
	if !failed {
		t.Errorf("no sandbox.failed event for the lost sandbox: %+v", events.Items)
	}
}

// TestNodeReturns: a node's process dies but its containers live. It is
// declared lost, its saved sandbox wakes elsewhere; when it comes back it
// kills its orphans before it serves, and no sandbox runs twice.
func TestNodeReturns(t *testing.T) {
	f := e2etest.StartFleet(t)
	c := f.Control.Admin
	ctx := context.Background()
	admin(t, f, "POST", "/v1/nodes/node-b/drain")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "orphan"})
	if _, err := c.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, sb.ID, api.StateAsleep)
	if _, err := c.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, sb.ID, api.StateRunning)
	admin(t, f, "POST", "/v1/nodes/node-b/undrain")

	a := f.Node("node-a")
	a.Stop(syscall.SIGKILL)
	if len(a.SandboxPIDs()) == 0 {
		t.Fatal("the sandbox's processes died with the node process")
	}
	f.WaitNode("node-a", "lost")
	wait(t, c, sb.ID, api.StateAsleep)
	if _, err := c.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, sb.ID, api.StateRunning)

	a.Start() // returns once it serves
	if pids := a.SandboxPIDs(); len(pids) != 0 {
		t.Fatalf("node-a serves with its orphans alive: %v", pids)
	}
	f.WaitNode("node-a", "ready")
	if got := nodeOf(t, f, sb.ID); got != "node-b" {
		t.Fatalf("sandbox on %q, want node-b", got)
	}
	if got := e2etest.MustOK(t, c, sb.ID, "echo one"); got != "one\n" {
		t.Fatalf("exec: %q", got)
	}
}
