package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/node/saves"
	cove "github.com/cove-dev/cove/sdk/go"
)

// ticker prints "tick N" lines over time, N counting up from 0; with
// stdin it also echoes each line read as "in LINE" and ends at EOF.
const (
	tickLoop  = `i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.05; done`
	tickStdin = `(` + tickLoop + `) & while read l; do echo "in $l"; done; kill $!`
)

// follower follows a command's output through the control plane, resuming
// with `after` whenever the stream is cut, and keeps every record.
type follower struct {
	mu   sync.Mutex
	recs []api.OutputRecord
	errs []string
	done chan struct{}
}

// follow starts following and stops at the exit record or when ctx ends.
func follow(ctx context.Context, c *cove.Client, sb, cmd string) *follower {
	f := &follower{done: make(chan struct{})}
	go func() { // owned: the test cancels ctx and waits on done
		defer close(f.done)
		var after int64
		for ctx.Err() == nil {
			err := c.Output(ctx, sb, cmd, after, true, func(r api.OutputRecord) error {
				f.mu.Lock()
				f.recs = append(f.recs, r)
				f.mu.Unlock()
				after = r.Seq
				if r.Type == "exit" {
					return errExit
				}
				return nil
			})
			if errors.Is(err, errExit) || (err == nil && f.exited()) {
				return
			}
			if err != nil && ctx.Err() == nil {
				f.mu.Lock()
				f.errs = append(f.errs, err.Error())
				f.mu.Unlock()
				select { // a cut stream: resume at once, a refused call after a breath
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}()
	return f
}

var errExit = errors.New("exit")

func (f *follower) exited() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.recs) > 0 && f.recs[len(f.recs)-1].Type == "exit"
}

// stdout is everything the command printed on stdout so far.
func (f *follower) stdout() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, r := range f.recs {
		if r.Stream == "stdout" {
			b.Write(r.Data)
		}
	}
	return b.String()
}

// ticks are the numbers of the complete "tick N" lines printed so far.
func ticks(out string) []int {
	var n []int
	lines := strings.Split(out, "\n")
	for _, l := range lines[:len(lines)-1] {
		if v, ok := strings.CutPrefix(l, "tick "); ok {
			i, err := strconv.Atoi(v)
			if err == nil {
				n = append(n, i)
			}
		}
	}
	return n
}

// waitOutput waits until the output followed satisfies ok.
func (f *follower) waitOutput(t *testing.T, what string, ok func(out string) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if ok(f.stdout()) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	out := f.stdout()
	f.mu.Lock()
	defer f.mu.Unlock()
	t.Fatalf("output never showed %s; stream errors %q; last output %q", what, f.errs, out[max(0, len(out)-400):])
}

// checkSequence fails unless the records' seqs increase (they may skip
// numbers, as docs/api.md says: a reader behind gets records already
// recorded as one chunk named by the last one's seq) and the ticks
// printed count up from 0 by one: no gap, no duplicate.
func (f *follower) checkSequence(t *testing.T) []int {
	t.Helper()
	f.mu.Lock()
	for i, r := range f.recs {
		if r.Seq < 1 || i > 0 && r.Seq <= f.recs[i-1].Seq {
			f.mu.Unlock()
			t.Fatalf("record %d has seq %d after %d: a duplicate or a step back", i, r.Seq, f.recs[max(0, i-1)].Seq)
		}
	}
	f.mu.Unlock()
	n := ticks(f.stdout())
	for i, v := range n {
		if v != i {
			t.Fatalf("tick %d printed at place %d: a gap or a duplicate in %v", v, i, n[max(0, i-5):min(len(n), i+5)])
		}
	}
	return n
}

func hasTick(from int) func(string) bool {
	return func(out string) bool {
		n := ticks(out)
		return len(n) > 0 && n[len(n)-1] >= from
	}
}

// longLived are the processes of a node's sandbox that are not a passing
// sleep. The shell's loop forks a child that is a copy of the shell until
// it becomes sleep, so one look can catch a process about to end: the
// set is taken when five looks in a row agree.
func longLived(t *testing.T, n *e2etest.Node, sandbox string) []int {
	t.Helper()
	look := func() []int {
		var pids []int
		for _, pid := range n.SandboxPIDs(sandbox) {
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if err == nil && strings.TrimSpace(string(comm)) != "sleep" {
				pids = append(pids, pid)
			}
		}
		slices.Sort(pids)
		return pids
	}
	last, same := look(), 1
	for range 500 {
		time.Sleep(20 * time.Millisecond)
		now := look()
		if !slices.Equal(now, last) {
			last, same = now, 1
			continue
		}
		if same++; same == 5 {
			return now
		}
	}
	t.Fatalf("sandbox %s on %s never showed the same processes five looks in a row: %v", sandbox, n.Name, last)
	return nil
}

// alive fails unless every pid still runs in the node's sandboxes.
func alive(t *testing.T, n *e2etest.Node, pids []int) {
	t.Helper()
	now := n.SandboxPIDs()
	for _, pid := range pids {
		if !slices.Contains(now, pid) {
			t.Fatalf("sandbox process %d on %s is gone (now %v)", pid, n.Name, now)
		}
	}
}

// onNode creates a sandbox placed on the node named, draining the others
// for the create.
func onNode(t *testing.T, f *e2etest.Fleet, node, name string) api.Sandbox {
	t.Helper()
	for _, n := range f.Nodes {
		if n.Name != node {
			admin(t, f, "POST", "/v1/nodes/"+n.Name+"/drain")
		}
	}
	sb := e2etest.Create(t, f.Control.Admin, api.CreateSandboxRequest{Name: name})
	for _, n := range f.Nodes {
		if n.Name != node {
			admin(t, f, "POST", "/v1/nodes/"+n.Name+"/undrain")
		}
	}
	if got := nodeOf(t, f, sb.ID); got != node {
		t.Fatalf("sandbox %s placed on %q, want %s", name, got, node)
	}
	return sb
}

// TestNodeRestart: a node stopped with SIGTERM leaves its sandboxes
// running; started again it reattaches: the same processes, a running
// command's output followed through the control plane goes on with no gap
// or duplicate, its stdin still reaches it, exec works.
func TestNodeRestart(t *testing.T) {
	f := e2etest.StartFleet(t, noWarm)
	c := f.Control.Admin
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sb := onNode(t, f, "node-a", "restarted")
	cmd, err := c.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: tickStdin, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	out := follow(ctx, c, sb.ID, cmd.ID)
	out.waitOutput(t, "tick 5", hasTick(5))
	inSandbox(t, c, sb.ID, cmd.PID)
	if err := c.Stdin(ctx, sb.ID, cmd.ID, strings.NewReader("before\n"), false); err != nil {
		t.Fatal(err)
	}
	out.waitOutput(t, "in before", func(s string) bool { return strings.Contains(s, "in before\n") })

	a := f.Node("node-a")
	pids := longLived(t, a, sb.ID)
	if len(pids) < 3 {
		t.Fatalf("node-a's sandbox processes: %v", pids)
	}
	a.Stop(syscall.SIGTERM)
	alive(t, a, pids)
	a.Start()
	alive(t, a, pids)
	f.WaitNode("node-a", "ready")

	last := ticks(out.stdout())
	out.waitOutput(t, "ticks after the restart", hasTick(last[len(last)-1]+20))
	if err := c.Stdin(ctx, sb.ID, cmd.ID, strings.NewReader("after\n"), false); err != nil {
		t.Fatalf("stdin after the restart: %v", err)
	}
	out.waitOutput(t, "in after", func(s string) bool { return strings.Contains(s, "in after\n") })
	if got := e2etest.MustOK(t, c, sb.ID, "echo again"); got != "again\n" {
		t.Fatalf("exec after the restart: %q", got)
	}
	if s, err := c.GetSandbox(ctx, sb.ID); err != nil || s.State != api.StateRunning {
		t.Fatalf("sandbox after the restart: %s %v", s.State, err)
	}
	alive(t, a, pids)
	if cm, err := c.GetCommand(ctx, sb.ID, cmd.ID); err != nil || cm.PID != cmd.PID {
		t.Fatalf("the command after the node's restart: pid %d %v, want %d", cm.PID, err, cmd.PID)
	}
	inSandbox(t, c, sb.ID, cmd.PID)

	if err := c.Stdin(ctx, sb.ID, cmd.ID, nil, true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-out.done:
	case <-time.After(time.Minute):
		t.Fatalf("the command did not end after stdin's EOF: %q", out.stdout())
	}
	if n := out.checkSequence(t); len(n) < len(last)+20 {
		t.Fatalf("%d ticks in all, %d before the restart", len(n), len(last))
	}
	if s := out.stdout(); strings.Count(s, "in before\n") != 1 || strings.Count(s, "in after\n") != 1 {
		t.Fatalf("stdin lines echoed: %q", s)
	}
}

// TestControlRestart: the control plane stopped with SIGTERM and started
// again finds its nodes: they register again with their certificates (the
// join token is neither rewritten nor used), their sandboxes and commands
// go on running and are not failed, and new creates are placed.
func TestControlRestart(t *testing.T) {
	f := e2etest.StartFleet(t, noWarm)
	c := f.Control.Admin
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	token, err := os.ReadFile(f.JoinTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, n := range f.ListNodes() {
		ids[n.Name] = n.ID
	}
	type running struct {
		sb, cmd string
		node    *e2etest.Node
		pids    []int
		// pid is the command's own, in its sandbox (api.Command.PID).
		pid int
		out *follower
	}
	var rs []*running
	for _, name := range []string{"node-a", "node-b"} {
		sb := onNode(t, f, name, "kept-"+name)
		cmd, err := c.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: tickLoop})
		if err != nil {
			t.Fatal(err)
		}
		r := &running{sb: sb.ID, cmd: cmd.ID, node: f.Node(name), out: follow(ctx, c, sb.ID, cmd.ID), pid: cmd.PID}
		inSandbox(t, c, sb.ID, r.pid)
		r.out.waitOutput(t, "tick 3", hasTick(3))
		r.pids = longLived(t, r.node, sb.ID)
		rs = append(rs, r)
	}
	// The join token file is now unreadable for the nodes: a node that
	// needed it to come back would fail.
	os.Rename(f.JoinTokenFile(), f.JoinTokenFile()+".away")

	f.Control.Stop(syscall.SIGTERM)
	for _, r := range rs {
		alive(t, r.node, r.pids)
	}
	// Down longer than --node-lost-after: the nodes are found again all
	// the same, counted from the control plane's start.
	for _, n := range f.Nodes {
		waitLog(t, n, "heartbeat failed", 6)
	}
	os.Rename(f.JoinTokenFile()+".away", f.JoinTokenFile())
	f.Control.Start()
	for _, n := range f.Nodes {
		f.WaitNode(n.Name, "ready")
	}
	for _, n := range f.ListNodes() {
		if ids[n.Name] != n.ID {
			t.Fatalf("node %s came back as %s, was %s", n.Name, n.ID, ids[n.Name])
		}
	}
	if len(ids) != 2 || len(f.ListNodes()) != 2 {
		t.Fatalf("nodes: %+v", f.ListNodes())
	}
	for _, n := range f.Nodes {
		// One join, with the token, at the start; every registration
		// since went with the node's certificate.
		if got := strings.Count(n.Tail(1<<20), `"msg":"joined the fleet"`); got != 1 {
			t.Fatalf("node %s joined %d times with the token", n.Name, got)
		}
	}
	for _, r := range rs {
		last := ticks(r.out.stdout())
		r.out.waitOutput(t, "ticks after the restart", hasTick(last[len(last)-1]+20))
		s, err := c.GetSandbox(ctx, r.sb)
		if err != nil || s.State != api.StateRunning {
			t.Fatalf("sandbox on %s after the control plane's restart: %s %q %v", r.node.Name, s.State, s.StateReason, err)
		}
		cm, err := c.GetCommand(ctx, r.sb, r.cmd)
		if err != nil || cm.State != api.CommandRunning || cm.PID != r.pid {
			t.Fatalf("its command: %s pid %d %v, want running pid %d", cm.State, cm.PID, err, r.pid)
		}
		inSandbox(t, c, r.sb, r.pid)
		alive(t, r.node, r.pids)
		if got := e2etest.MustOK(t, c, r.sb, "echo still"); got != "still\n" {
			t.Fatalf("exec: %q", got)
		}
		if err := c.Signal(ctx, r.sb, r.cmd, "KILL"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-r.out.done:
		case <-time.After(time.Minute):
			t.Fatal("the killed command's output never ended")
		}
		r.out.checkSequence(t)
		events, err := c.Events(ctx, cove.EventQuery{Sandbox: r.sb})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.Type == "sandbox.failed" || e.Type == "sandbox.asleep" {
				t.Fatalf("the sandbox on %s went %s across the restart", r.node.Name, e.Type)
			}
		}
	}
	placed := map[string]bool{}
	for i := range 4 {
		sb := e2etest.Create(t, c, api.CreateSandboxRequest{Name: fmt.Sprintf("new%d", i)})
		placed[nodeOf(t, f, sb.ID)] = true
		if got := e2etest.MustOK(t, c, sb.ID, "echo new"); got != "new\n" {
			t.Fatalf("exec in a sandbox made after the restart: %q", got)
		}
	}
	if !placed["node-a"] || !placed["node-b"] {
		t.Fatalf("creates after the restart placed on %v", placed)
	}
	if now, err := os.ReadFile(f.JoinTokenFile()); err != nil || !bytes.Equal(now, token) {
		t.Fatalf("the join token file changed across the restart: %v", err)
	}
}

// waitLog waits until the node's log has n more lines holding word than
// it had when called.
func waitLog(t *testing.T, n *e2etest.Node, word string, more int) {
	t.Helper()
	count := func() int { return strings.Count(n.Tail(1<<20), word) }
	from := count()
	deadline := time.Now().Add(time.Minute)
	for count() < from+more {
		if time.Now().After(deadline) {
			t.Fatalf("node %s logged no %q:\n%s", n.Name, word, n.Tail(3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// generations lists the generations in the bucket of a sandbox's save
// that have a manifest.
func generations(t *testing.T, f *e2etest.Fleet, id string) []string {
	t.Helper()
	u := f.Saves[len("s3://"):]
	bucket, rest, _ := strings.Cut(u, "/")
	prefix, _, _ := strings.Cut(rest, "?")
	prefix += "/saves/" + id + "/"
	resp, err := f.S3.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix})
	if err != nil {
		t.Fatal(err)
	}
	var gens []string
	for _, o := range resp.Contents {
		gen, name, _ := strings.Cut(strings.TrimPrefix(aws.ToString(o.Key), prefix), "/")
		if name == "manifest.json" {
			gens = append(gens, gen)
		}
	}
	slices.Sort(gens)
	return gens
}

// TestZombieSave: a complete save written under an old epoch, newer by
// its name than the generation the control plane recorded (a node that
// was lost and went on saving), never becomes the save a wake restores.
func TestZombieSave(t *testing.T) {
	f := e2etest.StartFleet(t, noWarm)
	c := f.Control.Admin
	ctx := context.Background()
	sb := onNode(t, f, "node-a", "saved")
	e2etest.MustOK(t, c, sb.ID, "echo first > /workspace/f")
	zombie := onNode(t, f, "node-a", "zombie")
	e2etest.MustOK(t, c, zombie.ID, "echo zombie > /workspace/f; echo zombie > /workspace/z")
	for _, id := range []string{sb.ID, zombie.ID} {
		if _, err := c.SleepSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		wait(t, c, id, api.StateAsleep)
	}
	g1 := generations(t, f, sb.ID)
	if len(g1) != 1 {
		t.Fatalf("generations after the first sleep: %v", g1)
	}
	oldEpoch, _, _ := strings.Cut(g1[0], "-")

	// It wakes on node-b and sleeps there: the recorded save is node-b's.
	admin(t, f, "POST", "/v1/nodes/node-a/drain")
	if _, err := c.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, sb.ID, api.StateRunning)
	if got := nodeOf(t, f, sb.ID); got != "node-b" {
		t.Fatalf("woke on %q, want node-b", got)
	}
	e2etest.MustOK(t, c, sb.ID, "echo second > /workspace/f")
	if _, err := c.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, sb.ID, api.StateAsleep)

	// node-a, in its old epoch, writes a complete save named newest.
	st, err := saves.Open(ctx, f.Saves, f.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	zgen := fmt.Sprintf("%s-%d", oldEpoch, time.Now().Add(time.Hour).UnixNano())
	if _, err := saves.Copy(ctx, st, zombie.ID, "", sb.ID, zgen, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Stat(ctx, sb.ID, ""); err != nil || m.Generation != zgen {
		t.Fatalf("the zombie's save is not the newest in the bucket: %+v %v", m, err)
	}

	admin(t, f, "POST", "/v1/nodes/node-a/undrain")
	for _, node := range []string{"node-b", "node-a"} {
		// Wake on each node in turn: none takes the zombie's save.
		other := map[string]string{"node-a": "node-b", "node-b": "node-a"}[node]
		admin(t, f, "POST", "/v1/nodes/"+other+"/drain")
		if _, err := c.WakeSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		wait(t, c, sb.ID, api.StateRunning)
		admin(t, f, "POST", "/v1/nodes/"+other+"/undrain")
		if got := nodeOf(t, f, sb.ID); got != node {
			t.Fatalf("woke on %q, want %s", got, node)
		}
		if got := e2etest.MustOK(t, c, sb.ID, "cat /workspace/f; ls /workspace"); got != "second\nf\n" {
			t.Fatalf("files after a wake on %s: %q, want the recorded save's", node, got)
		}
		if node == "node-b" {
			if _, err := c.SleepSandbox(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			wait(t, c, sb.ID, api.StateAsleep)
			// The zombie writes again, newer than this sleep's save.
			zgen = fmt.Sprintf("%s-%d", oldEpoch, time.Now().Add(2*time.Hour).UnixNano())
			if _, err := saves.Copy(ctx, st, zombie.ID, "", sb.ID, zgen, t.TempDir()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// cli runs the cove CLI as the admin.
func cli(t *testing.T, f *e2etest.Fleet, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), args...)
	cmd.Env = append(os.Environ(), "COVE_URL="+f.Control.URL, "COVE_API_KEY="+f.Control.AdminKey, "HOME="+t.TempDir())
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	if err != nil {
		return out.String() + errs.String(), fmt.Errorf("cove %s: %w: %s", strings.Join(args, " "), err, errs.String())
	}
	return out.String(), nil
}

// leftNothing fails if a node refused at join left its nftables table or
// its cgroup parent on the host.
func leftNothing(t *testing.T, n *e2etest.Node) {
	t.Helper()
	if err := exec.Command("nft", "list", "table", "inet", n.Table).Run(); err == nil {
		t.Errorf("node %s refused at join left its nft table %s", n.Name, n.Table)
	}
	if dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + n.Cgroup); len(dirs) != 0 {
		t.Errorf("node %s refused at join left its cgroups %v", n.Name, dirs)
	}
}

// TestRemoveAndRotate: `cove nodes rm` revokes a node (its sandboxes are
// handled as on loss, its process ends, its certificate is refused from
// then on); `cove nodes token --rotate` makes a new token that the old
// one stops being; a second process with a live node's name is refused.
func TestRemoveAndRotate(t *testing.T) {
	f := e2etest.StartFleet(t, noWarm)
	c := f.Control.Admin
	ctx := context.Background()
	saved := onNode(t, f, "node-a", "saved")
	e2etest.MustOK(t, c, saved.ID, "echo kept > /workspace/k")
	if _, err := c.SleepSandbox(ctx, saved.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, saved.ID, api.StateAsleep)
	admin(t, f, "POST", "/v1/nodes/node-b/drain")
	if _, err := c.WakeSandbox(ctx, saved.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, saved.ID, api.StateRunning)
	admin(t, f, "POST", "/v1/nodes/node-b/undrain")
	unsaved := onNode(t, f, "node-a", "unsaved")

	a := f.Node("node-a")
	if out, err := cli(t, f, "nodes", "rm", "node-a"); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(out, "removed") {
		t.Fatalf("cove nodes rm: %q", out)
	}
	if code := a.Wait(time.Minute); code == 0 {
		t.Fatalf("a removed node exited 0:\n%s", a.Tail(2000))
	}
	if tail := a.Tail(4000); !strings.Contains(tail, "removed") {
		t.Fatalf("a removed node's exit says nothing of its removal:\n%s", tail)
	}
	sb := wait(t, c, saved.ID, api.StateAsleep)
	if !strings.Contains(sb.StateReason, "node-a") {
		t.Errorf("state_reason of the saved sandbox: %q", sb.StateReason)
	}
	sb = wait(t, c, unsaved.ID, api.StateFailed)
	if !strings.HasPrefix(sb.StateReason, "node_lost") {
		t.Errorf("state_reason of the unsaved sandbox: %q", sb.StateReason)
	}
	a.KillSandboxes()
	// Started again, it is refused: its certificate is revoked.
	if err := a.StartNoWait(); err != nil {
		t.Fatal(err)
	}
	if code := a.Wait(time.Minute); code == 0 {
		t.Fatalf("a removed node started again and stayed:\n%s", a.Tail(2000))
	}
	if _, err := c.WakeSandbox(ctx, saved.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, c, saved.ID, api.StateRunning)
	if got := e2etest.MustOK(t, c, saved.ID, "cat /workspace/k"); got != "kept\n" || nodeOf(t, f, saved.ID) != "node-b" {
		t.Fatalf("woke from the save with %q on %s", got, nodeOf(t, f, saved.ID))
	}

	// Rotate: the old token stops admitting joins.
	old, err := os.ReadFile(f.JoinTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	oldFile := filepath.Join(t.TempDir(), "old-token")
	os.WriteFile(oldFile, old, 0o600)
	out, err := cli(t, f, "nodes", "token", "--rotate")
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.Fields(out)[0]
	if !strings.HasPrefix(tok, "cove-join-") || strings.TrimSpace(string(old)) == tok {
		t.Fatalf("cove nodes token --rotate printed %q", out)
	}
	if now, err := os.ReadFile(f.JoinTokenFile()); err != nil || strings.TrimSpace(string(now)) != tok {
		t.Fatalf("join-token file after a rotate: %q %v, want %q", now, err, tok)
	}
	refused := f.AddNodeNoWait("node-c", oldFile)
	if code := refused.Wait(time.Minute); code == 0 {
		t.Fatal("a node joined with the rotated-away token")
	}
	leftNothing(t, refused)
	// The new token, in the rewritten file, admits a join.
	f.AddNode("node-d", e2etest.ImagesDir())
	f.WaitNode("node-d", "ready")

	// A second process named as a live node is refused and leaves nothing.
	twin := f.AddNodeNoWait("node-b", f.JoinTokenFile())
	if code := twin.Wait(time.Minute); code == 0 {
		t.Fatal("a second node-b joined while node-b is alive")
	}
	leftNothing(t, twin)
	f.WaitNode("node-b", "ready")
	if got := e2etest.MustOK(t, c, saved.ID, "echo b"); got != "b\n" {
		t.Fatalf("exec on node-b after its twin was refused: %q", got)
	}

	ns := nodesJSON(t, f)
	want := map[string]api.NodeState{"node-a": "removed", "node-b": "ready", "node-d": "ready"}
	if len(ns) != len(want) {
		t.Fatalf("cove nodes ls --json: %+v, want %v", ns, want)
	}
	for name, state := range want {
		if ns[name].State != state {
			t.Fatalf("cove nodes ls --json: %s is %q, want %s", name, ns[name].State, state)
		}
	}
	if ns["node-b"].Sandboxes != 1 || ns["node-a"].Sandboxes != 0 {
		t.Fatalf("sandboxes per node: %+v", ns)
	}
}

// nodesJSON is `cove nodes ls --json` as the admin.
func nodesJSON(t *testing.T, f *e2etest.Fleet) map[string]api.Node {
	t.Helper()
	out, err := cli(t, f, "nodes", "ls", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var ns []api.Node
	if err := json.Unmarshal([]byte(out), &ns); err != nil {
		t.Fatalf("cove nodes ls --json: %v: %s", err, out)
	}
	m := map[string]api.Node{}
	for _, n := range ns {
		m[n.Name] = n
	}
	return m
}

// noWarm keeps a warm pool from taking creates past the drains that
// choose their node.
var noWarm = e2etest.FleetControlArgs("--warm-pool", "0")

// inSandbox checks that pid, a command's, is a process of the sandbox's
// own (its pid namespace), one the sandbox's own shell may name.
func inSandbox(t *testing.T, c *cove.Client, sandboxID string, pid int) {
	t.Helper()
	if pid <= 1 {
		t.Fatalf("a command's pid is %d", pid)
	}
	if got := e2etest.MustOK(t, c, sandboxID, fmt.Sprintf("test -d /proc/%d && echo here", pid)); got != "here\n" {
		t.Fatalf("the command's pid %d in sandbox %s: %q", pid, sandboxID, got)
	}
}
