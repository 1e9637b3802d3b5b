package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

var errStop = errors.New("stop reading")

// TestOutputResume: a client reading `seq 1 100000` goes away midway; a
// second one resuming with after= gets every remaining chunk exactly once,
// in order, then the exit record.
func TestOutputResume(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	cmd, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Argv: []string{"seq", "1", "100000"}})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	var last int64
	records := 0
	err = s.Admin.Output(ctx, sb.ID, cmd.ID, 0, true, func(r api.OutputRecord) error {
		if r.Seq <= last {
			return fmt.Errorf("seq %d after %d", r.Seq, last)
		}
		got.Write(r.Data)
		last = r.Seq
		if records++; records == 5 {
			return errStop // the first client goes away
		}
		return nil
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("first client: %v", err)
	}
	var exit *api.OutputRecord
	err = s.Admin.Output(ctx, sb.ID, cmd.ID, last, true, func(r api.OutputRecord) error {
		if r.Seq <= last {
			return fmt.Errorf("resumed stream repeats seq %d (last %d)", r.Seq, last)
		}
		last = r.Seq
		if r.Type == "exit" {
			exit = &r
			return nil
		}
		got.Write(r.Data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if got.String() != want.String() {
		t.Errorf("resumed output differs: %d bytes, want %d", got.Len(), want.Len())
	}
	if exit == nil || exit.ExitCode == nil || *exit.ExitCode != 0 {
		t.Errorf("exit record = %+v", exit)
	}
	// The raw stream with Range.
	req, _ := http.NewRequest("GET", s.URL+"/v1/sandboxes/"+sb.ID+"/commands/"+cmd.ID+"/stdout", nil)
	req.Header.Set("Authorization", "Bearer "+s.AdminKey)
	req.Header.Set("Range", "bytes=0-5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var part bytes.Buffer
	part.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusPartialContent || part.String() != "1\n2\n3\n" {
		t.Errorf("Range: %d %q", resp.StatusCode, part.String())
	}
}

func TestStdinSignalTimeout(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})

	t.Run("stdin in three posts and eof", func(t *testing.T) {
		cmd, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{
			Argv: []string{"awk", "{ s += $1 } END { print s }"}, Stdin: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		var parts [3]strings.Builder
		for i := 1; i <= 1000; i++ {
			fmt.Fprintf(&parts[i*3/1001], "%d\n", i)
		}
		for i, p := range parts {
			if err := s.Admin.Stdin(ctx, sb.ID, cmd.ID, strings.NewReader(p.String()), i == 2); err != nil {
				t.Fatal(err)
			}
		}
		if out := outputOf(t, s.Admin, sb.ID, cmd.ID); out != "500500\n" {
			t.Errorf("sum = %q", out)
		}
		// Stdin of an ended command is a conflict.
		err = s.Admin.Stdin(ctx, sb.ID, cmd.ID, strings.NewReader("1\n"), false)
		if api.ErrorCode(err) != api.CodeConflict {
			t.Errorf("stdin after the end: %v", err)
		}
	})

	t.Run("timeout kills the process tree", func(t *testing.T) {
		one := int64(1)
		res, err := s.Admin.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: "sleep 1000 & sleep 1000", TimeoutS: &one})
		if err != nil {
			t.Fatal(err)
		}
		if res.Command.State != api.CommandTimedOut || !res.Command.TimedOut {
			t.Errorf("state %s timed_out %v", res.Command.State, res.Command.TimedOut)
		}
		if out := e2etest.MustOK(t, s.Admin, sb.ID, "ps -o comm | grep -c '^sleep' || true"); strings.TrimSpace(out) != "0" {
			t.Errorf("sleep processes left: %s", out)
		}
	})

	t.Run("signal reaches the process group", func(t *testing.T) {
		cmd, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "sleep 1000 & sleep 1000; echo never"})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if err := s.Admin.Signal(ctx, sb.ID, cmd.ID, "TERM"); err != nil {
			t.Fatal(err)
		}
		c := waitCommand(t, s.Admin, sb.ID, cmd.ID)
		if c.State != api.CommandKilled || c.Signal != "TERM" {
			t.Errorf("after TERM: %s %q", c.State, c.Signal)
		}
		if out := e2etest.MustOK(t, s.Admin, sb.ID, "ps -o comm | grep -c '^sleep' || true"); strings.TrimSpace(out) != "0" {
			t.Errorf("sleep processes left: %s", out)
		}
		if err := s.Admin.Signal(ctx, sb.ID, cmd.ID, "BOGUS"); api.ErrorCode(err) != api.CodeConflict && api.ErrorCode(err) != api.CodeInvalidArgument {
			t.Errorf("bad signal: %v", err)
		}
	})

	t.Run("a client going away leaves the command running", func(t *testing.T) {
		cmd, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; sleep 0.1; done"})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		n := 0
		err = s.Admin.Output(cctx, sb.ID, cmd.ID, 0, true, func(api.OutputRecord) error {
			if n++; n == 2 {
				cancel() // the client is killed while following
			}
			return nil
		})
		if err == nil {
			t.Fatal("cancelled follower saw the whole stream")
		}
		c := waitCommand(t, s.Admin, sb.ID, cmd.ID)
		if c.State != api.CommandExited || outputOf(t, s.Admin, sb.ID, cmd.ID) != "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n" {
			t.Errorf("command after its follower went away: %s", c.State)
		}
	})
}

func TestNoOutputAlertAndEvents(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "ev"})
	one := int64(1)
	res, err := s.Admin.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: "sleep 4", NoOutputAlertS: &one})
	if err != nil || res.Command.State != api.CommandExited {
		t.Fatalf("sleep 4: %v %+v", err, res.Command)
	}
	alerts := events(t, s, "sandbox=ev&type=command.no_output")
	if len(alerts) != 1 || alerts[0].CommandID != res.Command.ID {
		t.Errorf("no_output events = %+v, want exactly one for %s", alerts, res.Command.ID)
	}
	// Output breaks the silence and re-arms the alert.
	res, err = s.Admin.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: "sleep 2; echo x; sleep 2", NoOutputAlertS: &one})
	if err != nil {
		t.Fatal(err)
	}
	if got := events(t, s, "sandbox=ev&type=command.no_output"); len(got) != 3 {
		t.Errorf("after a second command with two silences: %d alerts, want 3", len(got))
	}
	all := events(t, s, "sandbox="+sb.ID)
	var types []string
	for _, e := range all {
		types = append(types, e.Type)
	}
	joined := strings.Join(types, " ")
	for _, want := range []string{"sandbox.creating", "sandbox.running", "command.started", "command.exited"} {
		if !strings.Contains(joined, want) {
			t.Errorf("events %v lack %s", types, want)
		}
	}
	// Paging by cursor returns the rest, oldest first (events are written
	// asynchronously: the last exit may arrive between the two reads).
	rest := events(t, s, "sandbox="+sb.ID+"&after="+all[0].ID)
	if len(rest) < len(all)-1 {
		t.Fatalf("after the first: %d events of %d", len(rest), len(all))
	}
	for i, e := range all[1:] {
		if rest[i].ID != e.ID {
			t.Errorf("after the first, event %d is %s, want %s", i, rest[i].ID, e.ID)
		}
	}
	if status, er, _ := e2etest.RawRequest(t, "GET", s.URL+"/v1/events?after=bogus", s.AdminKey, ""); status != 400 || er.Error.Code != api.CodeInvalidArgument {
		t.Errorf("bad cursor: %d", status)
	}
}

func TestConcurrentCommands(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sandboxes := make([]api.Sandbox, 10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	for i := range sandboxes {
		wg.Go(func() {
			sb, err := s.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("c%d", i)}, true)
			if err != nil || sb.State != api.StateRunning {
				fail("create %d: %v %s", i, err, sb.StateReason)
			}
			sandboxes[i] = sb
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatal(strings.Join(failures, "\n"))
	}
	run := func(sb api.Sandbox, j int) {
		cmd := fmt.Sprintf("for k in $(seq 1 200); do echo %s-%d-$k; done; echo err-%d >&2", sb.Name, j, j)
		res, err := s.Admin.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: cmd})
		if err != nil {
			fail("%s/%d: %v", sb.Name, j, err)
			return
		}
		var want strings.Builder
		for k := 1; k <= 200; k++ {
			fmt.Fprintf(&want, "%s-%d-%d\n", sb.Name, j, k)
		}
		if res.Stdout != want.String() || res.Stderr != fmt.Sprintf("err-%d\n", j) || e2etest.ExitCode(res) != 0 {
			fail("%s/%d: tangled output (%d bytes, stderr %q)", sb.Name, j, len(res.Stdout), res.Stderr)
		}
	}
	// 50 at once in one sandbox.
	for j := range 50 {
		wg.Go(func() { run(sandboxes[0], j) })
	}
	wg.Wait()
	// 10 sandboxes × 10 at once.
	for _, sb := range sandboxes {
		for j := range 10 {
			wg.Go(func() { run(sb, j) })
		}
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Error(strings.Join(failures, "\n"))
	}
}

func outputOf(t testing.TB, c *cove.Client, ref, id string) string {
	t.Helper()
	var b bytes.Buffer
	if err := c.Output(t.Context(), ref, id, 0, true, func(r api.OutputRecord) error {
		b.Write(r.Data)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func waitCommand(t testing.TB, c *cove.Client, ref, id string) api.Command {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cmd, err := c.GetCommand(t.Context(), ref, id)
		if err != nil {
			t.Fatal(err)
		}
		if cmd.State.Done() || time.Now().After(deadline) {
			return cmd
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func events(t testing.TB, s *e2etest.Server, query string) []api.Event {
	t.Helper()
	status, _, body := e2etest.RawRequest(t, "GET", s.URL+"/v1/events?"+query, s.AdminKey, "")
	if status != 200 {
		t.Fatalf("events: %d %s", status, body)
	}
	var page api.List[api.Event]
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	return page.Items
}

// TestEventStream follows the team's events as server-sent events and
// resumes after a seen event.
func TestEventStream(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "one"})
	seen := events(t, s, "sandbox="+first.ID)
	last := seen[len(seen)-1].ID

	got := make(chan api.Event, 16)
	var wg sync.WaitGroup
	wg.Go(func() {
		s.Admin.FollowEvents(ctx, cove.EventQuery{After: last}, func(e api.Event) error {
			got <- e
			return nil
		})
	})
	defer wg.Wait()
	defer cancel()
	second := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "two"})
	for want := range 2 { // sandbox.creating, sandbox.running of the second
		select {
		case e := <-got:
			if e.SandboxID != second.ID || e.ID <= last {
				t.Errorf("event %d: %+v (after %s)", want, e, last)
			}
		case <-ctx.Done():
			t.Fatalf("no event %d from the stream", want)
		}
	}
}

// TestWaitWhileTerminated: a client waiting on a command whose sandbox is
// terminated gets the command back as lost, not an error.
func TestWaitWhileTerminated(t *testing.T) {
	s := e2etest.StartServer(t)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	type result struct {
		res api.CommandResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.Admin.ExecWait(t.Context(), sb.ID, api.CreateCommandRequest{Command: "echo started; sleep 60"})
		done <- result{res, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cmds, _ := s.Admin.ListCommands(t.Context(), sb.ID, 0, "")
		if len(cmds.Items) == 1 {
			if c, err := s.Admin.GetCommand(t.Context(), sb.ID, cmds.Items[0].ID); err == nil && c.StdoutBytes > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never printed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := s.Admin.TerminateSandbox(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.res.Command.State != api.CommandLost || r.res.Stdout != "started\n" {
			t.Errorf("wait across terminate: %+v %v", r.res, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting client was never answered")
	}
}

// TestCommandPID: a command's pid, in its answer and in GET
// …/commands/{id}, is the pid of its process in the sandbox's own
// namespace: /proc inside the sandbox shows it, a kill of it from
// another command ends it, and the command keeps it, across a restart of
// the server (which reattaches the sandbox) and after it ends.
func TestCommandPID(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	cmd, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Argv: []string{"sleep", "303"}})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.PID <= 1 {
		t.Fatalf("the command's answer has pid %d", cmd.PID)
	}
	// The wire's own name for it, as a client written from docs/api.md
	// reads it.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/v1/sandboxes/"+sb.ID+"/commands/"+cmd.ID, nil)
	req.Header.Set("Authorization", "Bearer "+s.AdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	json.NewDecoder(resp.Body).Decode(&raw)
	resp.Body.Close()
	if raw["pid"] != float64(cmd.PID) {
		t.Fatalf("GET …/commands/%s: pid %v (%d), want %d", cmd.ID, raw["pid"], resp.StatusCode, cmd.PID)
	}
	cmdline := fmt.Sprintf("tr '\\0' ' ' < /proc/%d/cmdline", cmd.PID)
	if got := e2etest.MustOK(t, s.Admin, sb.ID, cmdline); got != "sleep 303 " {
		t.Fatalf("the sandbox's process %d is %q, want sleep 303", cmd.PID, got)
	}

	s.Stop(syscall.SIGTERM)
	s.Start()
	after, err := s.Admin.GetCommand(ctx, sb.ID, cmd.ID)
	if err != nil || after.State != api.CommandRunning || after.PID != cmd.PID {
		t.Fatalf("after a restart: %s pid %d %v, want running pid %d", after.State, after.PID, err, cmd.PID)
	}
	if got := e2etest.MustOK(t, s.Admin, sb.ID, cmdline); got != "sleep 303 " {
		t.Fatalf("after a restart the sandbox's process %d is %q, want sleep 303", cmd.PID, got)
	}
	e2etest.MustOK(t, s.Admin, sb.ID, fmt.Sprintf("kill %d", cmd.PID))
	c := waitCommand(t, s.Admin, sb.ID, cmd.ID)
	if c.State != api.CommandKilled || c.Signal != "TERM" || c.PID != cmd.PID {
		t.Errorf("after kill %d inside the sandbox: %s %q pid %d, want killed by TERM, pid kept", cmd.PID, c.State, c.Signal, c.PID)
	}
}
