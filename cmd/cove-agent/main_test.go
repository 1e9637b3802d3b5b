package main

import (
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
)

// TestMain lets the test binary run as cove-agent when a test starts it
// so; otherwise it runs the tests and fails them when a goroutine they
// started is still running after them.
func TestMain(m *testing.M) {
	if os.Getenv("COVE_AGENT_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	if pid := os.Getenv("COVE_AGENT_TEST_PROBE"); pid != "" {
		probe(pid)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// syncBuffer is a bytes.Buffer safe for the writer goroutine of exec.Cmd
// and the test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// initAgent is cove-agent (this test binary) running as PID 1 of a new
// PID namespace, as runc starts it.
type initAgent struct {
	cmd    *exec.Cmd
	waited chan error // its Wait's one result, put back by whoever takes it
	c      *client.Client
	logs   *syncBuffer
	dir    string // its workdir's parent
}

// startInit starts cove-agent as PID 1 of a new PID namespace, on a
// listener inherited as descriptor 3, with env added to its environment,
// and waits for its first answer. It is killed after the test.
func startInit(t *testing.T, env ...string) *initAgent {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	lf, err := ul.File()
	if err != nil {
		t.Fatal(err)
	}
	l.Close()

	a := &initAgent{logs: &syncBuffer{}, dir: dir, waited: make(chan error, 1)}
	a.cmd = exec.Command(os.Args[0], "--workdir", filepath.Join(dir, "work"))
	a.cmd.Env = append(append(os.Environ(), "COVE_AGENT_TEST_MAIN=1"), env...)
	a.cmd.ExtraFiles = []*os.File{lf} // descriptor 3
	a.cmd.Stderr = a.logs
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lf.Close()
	go func() { a.waited <- a.cmd.Wait() }()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		<-a.waited
		if t.Failed() {
			t.Logf("agent log:\n%s", a.logs.String())
		}
	})
	a.c = client.Dial(sock)
	t.Cleanup(func() { a.c.Close() })
	p, err := a.c.Ping(t.Context())
	if err != nil || p.PID != 1 || p.Version != wire.Version {
		t.Fatalf("ping %+v %v", p, err)
	}
	return a
}

// TestInit runs cove-agent as PID 1 of a new PID namespace, on a listener
// inherited as descriptor 3, as runc starts it.
func TestInit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a PID namespace")
	}
	a := startInit(t)
	c, cmd, waited, ctx := a.c, a.cmd, a.waited, t.Context()
	fi, err := os.Stat(filepath.Join(a.dir, "work"))
	if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("workdir: %v %+v", err, fi)
	}

	env := []string{"PATH=/usr/bin:/bin"}
	// An orphan that outlives its parent is reaped by the agent; the
	// command's own exit still arrives.
	if _, err := c.Exec(ctx, wire.ExecRequest{ID: "a", Argv: []string{"sh", "-c", "(sleep 0.1 >/dev/null 2>&1 &); echo $$; exit 7"}, Env: env}); err != nil {
		t.Fatal(err)
	}
	out, exit := collect(t, c, "a")
	if strings.TrimSpace(out) == "" || exit.ExitCode != 7 {
		t.Errorf("output %q exit %+v", out, exit)
	}
	if _, err := c.Exec(ctx, wire.ExecRequest{ID: "b", Argv: []string{"sleep", "1000"}, Env: env}); err != nil {
		t.Fatal(err)
	}

	// SIGTERM: the agent kills the commands and exits cleanly.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// An agent that ignores SIGTERM shows as this test hanging here.
	err = <-waited
	waited <- err // for the cleanup
	if err != nil {
		t.Errorf("agent exit: %v", err)
	}
}

func collect(t *testing.T, c *client.Client, id string) (string, wire.ExitData) {
	t.Helper()
	s, err := c.Output(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out strings.Builder
	var exit wire.ExitData
	for {
		f, err := s.Next()
		if err == io.EOF {
			return out.String(), exit
		}
		if err != nil {
			t.Fatal(err)
		}
		switch f.Kind {
		case wire.FrameStdout, wire.FrameStderr:
			out.Write(f.Data)
		case wire.FrameExit:
			exit, _ = wire.ParseExit(f.Data)
		}
	}
}

func TestFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"extra argument", []string{"x"}, "unexpected arguments"},
		{"relative workdir", []string{"--workdir", "w"}, "absolute"},
		{"negative uid", []string{"--uid", "-1"}, "negative"},
		{"no listener", []string{"--listen", "/nonexistent/dir/s.sock"}, "listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(t.Context(), tt.args, io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}
