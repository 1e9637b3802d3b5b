package agentguard

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// agentPID is the host PID of a sandbox's agent, from runc's state.
func agentPID(t *testing.T, s *e2etest.Server, id string) int {
	t.Helper()
	out, err := exec.Command("runc", "--root", filepath.Join(s.DataDir, "runc"), "state", id).Output()
	if err != nil {
		t.Fatalf("runc state %s: %v", id, err)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 0 {
		t.Fatalf("runc state %s: %q %v", id, out, err)
	}
	return st.Pid
}

// replaceSocket puts a socket of the test where the host dials sandbox
// id's agent, served by serve (nil: connections are queued and never
// accepted). The sandbox's own agent runs on, unreachable.
func replaceSocket(t *testing.T, s *e2etest.Server, id string, serve http.HandlerFunc) {
	t.Helper()
	sock := filepath.Join(s.DataDir, "sandboxes", id, "agent.sock")
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if serve == nil {
		t.Cleanup(func() { l.Close() })
		return
	}
	srv := &http.Server{Handler: serve}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
}

// stopAgent stops the agent of sandbox id with SIGSTOP, from the host,
// until the test ends, and returns its PID.
func stopAgent(t *testing.T, s *e2etest.Server, id string) int {
	t.Helper()
	pid := agentPID(t, s, id)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) }) // before the server's cleanup
	// kill returns before the stop is taken: wait until every thread of
	// the agent is stopped, so that no call is served in between.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		states, err := threadStates(pid)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Trim(states, "T") == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %d's threads are %q a minute after SIGSTOP", pid, states)
		}
	}
	return pid
}

// threadStates are the states (the third field of /proc/PID/task/TID/stat:
// R, S, T…) of a process's threads, one letter each.
func threadStates(pid int) (string, error) {
	stats, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/stat")
	if err != nil || len(stats) == 0 {
		return "", fmt.Errorf("threads of %d: %v", pid, err)
	}
	var b strings.Builder
	for _, f := range stats {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that has just ended
		}
		// "pid (comm) S …": comm may hold spaces and parentheses.
		if i := strings.LastIndexByte(string(raw), ')'); i >= 0 && i+2 < len(raw) {
			b.WriteByte(raw[i+2])
		}
	}
	return b.String(), nil
}

// TestHungAgentFailsItsCalls: a command sent to a stopped agent fails as
// unavailable instead of waiting forever, and another sandbox serves
// meanwhile.
func TestHungAgentFailsItsCalls(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	stopped := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	healthy := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	stopAgent(t, s, stopped.ID)

	hung := make(chan error, 1)
	go func() {
		_, err := s.Admin.Exec(ctx, stopped.ID, api.CreateCommandRequest{Command: "true"})
		hung <- err
	}()
	if out := e2etest.MustOK(t, s.Admin, healthy.ID, "echo alive"); out != "alive\n" {
		t.Errorf("healthy sandbox while another's agent is stopped: %q", out)
	}
	select {
	case err := <-hung:
		var e *api.Error
		if !errors.As(err, &e) || e.Code != api.CodeUnavailable {
			t.Errorf("command to a stopped agent: %v, want unavailable", err)
		}
	case <-time.After(10 * time.Minute): // far beyond every bound: a hang
		t.Fatal("a command to a stopped agent still waits after 10 minutes")
	}
}

// TestRestartWithHungAgents: `cove serve` restarts while three agents hang
// (one stopped with a command running, one whose socket queues connections
// and never answers, one that answers pings and nothing else), marks their
// sandboxes failed, and serves the others.
func TestRestartWithHungAgents(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	stopped := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	silent := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	pingOnly := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	healthy := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	if _, err := s.Admin.Exec(ctx, stopped.ID, api.CreateCommandRequest{Command: "sleep 1000"}); err != nil {
		t.Fatal(err)
	}

	s.Stop(syscall.SIGTERM)
	pid := stopAgent(t, s, stopped.ID)
	replaceSocket(t, s, silent.ID, nil)
	replaceSocket(t, s, pingOnly.ID, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/ping" {
			io.WriteString(w, `{"version":1,"pid":1}`)
			return
		}
		<-r.Context().Done() // anything else: no answer
	})
	s.Start() // fails the test if it does not come up

	for _, sb := range []api.Sandbox{stopped, silent, pingOnly} {
		got, err := s.Admin.GetSandbox(ctx, sb.ID)
		if err != nil || got.State != api.StateFailed {
			t.Errorf("sandbox %s with a hung agent after the restart: %s (%s) %v, want failed", sb.ID, got.State, got.StateReason, err)
		}
	}
	if out := e2etest.MustOK(t, s.Admin, healthy.ID, "echo alive"); out != "alive\n" {
		t.Errorf("healthy sandbox after the restart: %q", out)
	}
	// The stopped agent's sandbox was destroyed with its failure.
	if b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); strings.Contains(string(b), "cove-agent") {
		t.Errorf("the stopped agent %d lives on: %q", pid, b)
	}
}
