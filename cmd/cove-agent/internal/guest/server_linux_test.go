package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
)

// testPath is the PATH of test commands.
const testPath = "PATH=/usr/local/bin:/usr/bin:/bin"

// startServer serves a Server on a temporary socket for the test and
// returns it with a client. Cleanup stops both and checks that no process
// is left.
func startServer(t *testing.T, cfg ServerConfig) (*Server, *client.Client) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("agent server tests need root (credentials, reaping)")
	}
	dir := t.TempDir()
	if cfg.Workdir == "" {
		cfg.Workdir = filepath.Join(dir, "work")
	}
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := NewServer(cfg, log)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(t.Context(), l); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	c := client.Dial(sock)
	t.Cleanup(func() {
		c.Close()
		wg.Wait() // t.Context() is done before cleanups run
		srv.Close()
		checkNoChildren(t)
	})
	return srv, c
}

// checkNoChildren fails if the test process has children (it is their
// subreaper, so any descendant left would have one) once reaping settled.
func checkNoChildren(t *testing.T) {
	t.Helper()
	var left []string
	for range 200 {
		left = children()
		if len(left) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("processes left behind: %v", left)
}

// procStat is the part of /proc/PID/stat we look at.
type procStat struct {
	pid, ppid, pgrp int
	state           string
	comm            string
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	s := string(b)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return procStat{}, fmt.Errorf("bad stat %q", s)
	}
	f := strings.Fields(s[j+1:])
	if len(f) < 3 {
		return procStat{}, fmt.Errorf("bad stat %q", s)
	}
	st := procStat{pid: pid, comm: s[i+1 : j], state: f[0]}
	st.ppid, _ = strconv.Atoi(f[1])
	st.pgrp, _ = strconv.Atoi(f[2])
	return st, nil
}

func allProcs() []procStat {
	ents, _ := os.ReadDir("/proc")
	var out []procStat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			out = append(out, st)
		}
	}
	return out
}

func children() []string {
	var out []string
	for _, p := range allProcs() {
		if p.ppid == os.Getpid() {
			out = append(out, fmt.Sprintf("%d %s (%s)", p.pid, p.comm, p.state))
		}
	}
	return out
}

func inGroup(pgid int) []string {
	var out []string
	for _, p := range allProcs() {
		if p.pgrp == pgid {
			out = append(out, fmt.Sprintf("%d %s (%s)", p.pid, p.comm, p.state))
		}
	}
	return out
}

// groupLeft waits, a bounded while, for process group pgid to be empty,
// and returns what is left of it. A killed group's orphans (a shell's
// subshell killed between fork and exec) are reaped by the agent's
// reaper a moment after the command's own exit is reported.
func groupLeft(pgid int) []string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := inGroup(pgid)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// chunk is a run of output of one kind.
type chunk struct {
	kind byte
	data string
}

type result struct {
	stdout, stderr string
	chunks         []chunk // consecutive frames of a kind merged
	exit           wire.ExitData
	lastSeq        int64
}

// collect reads the output of id after `after` to its end.
func collect(t *testing.T, c *client.Client, id string, after int64) result {
	t.Helper()
	s, err := c.Output(t.Context(), id, after)
	if err != nil {
		t.Fatal(err)
	}
	return readStream(t, s)
}

// readStream reads s to its end.
func readStream(t *testing.T, s *client.OutputStream) result {
	t.Helper()
	defer s.Close()
	var r result
	var out, errb strings.Builder
	for {
		f, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		r.lastSeq = f.Seq
		switch f.Kind {
		case wire.FrameStdout:
			out.Write(f.Data)
		case wire.FrameStderr:
			errb.Write(f.Data)
		case wire.FrameExit:
			if r.exit, err = wire.ParseExit(f.Data); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if n := len(r.chunks); n > 0 && r.chunks[n-1].kind == f.Kind {
			r.chunks[n-1].data += string(f.Data)
		} else {
			r.chunks = append(r.chunks, chunk{f.Kind, string(f.Data)})
		}
	}
	r.stdout, r.stderr = out.String(), errb.String()
	return r
}

func run(t *testing.T, c *client.Client, req wire.ExecRequest) result {
	t.Helper()
	if req.Env == nil {
		req.Env = []string{testPath}
	}
	if _, err := c.Exec(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	return collect(t, c, req.ID, 0)
}

func TestExec(t *testing.T) {
	srv, c := startServer(t, ServerConfig{})
	tests := []struct {
		name   string
		req    wire.ExecRequest
		stdout string
		stderr string
		chunks []chunk // checked when set
		exit   wire.ExitData
	}{
		{name: "argv", req: wire.ExecRequest{Argv: []string{"echo", "hello", "  world"}}, stdout: "hello   world\n"},
		{
			name:   "order",
			req:    wire.ExecRequest{Argv: []string{"sh", "-c", "echo a; sleep 0.1; echo b >&2; sleep 0.1; echo c; exit 3"}},
			stdout: "a\nc\n", stderr: "b\n",
			chunks: []chunk{{wire.FrameStdout, "a\n"}, {wire.FrameStderr, "b\n"}, {wire.FrameStdout, "c\n"}},
			exit:   wire.ExitData{ExitCode: 3},
		},
		{name: "bytes", req: wire.ExecRequest{Argv: []string{"sh", "-c", `printf '\000\377\r\n'; printf 'x\001' >&2`}}, stdout: "\x00\xff\r\n", stderr: "x\x01"},
		{name: "exit code", req: wire.ExecRequest{Argv: []string{"sh", "-c", "exit 42"}}, exit: wire.ExitData{ExitCode: 42}},
		{name: "killed", req: wire.ExecRequest{Argv: []string{"sh", "-c", "kill -TERM $$"}}, exit: wire.ExitData{ExitCode: -1, Signal: "TERM"}},
		{name: "env exact", req: wire.ExecRequest{Argv: []string{"env"}, Env: []string{"B=2", testPath, "A=1"}}, stdout: "B=2\n" + testPath + "\nA=1\n"},
		{name: "cwd", req: wire.ExecRequest{Argv: []string{"pwd"}, Cwd: "/usr"}, stdout: "/usr\n"},
		{name: "default cwd", req: wire.ExecRequest{Argv: []string{"sh", "-c", "pwd; stat -c %u:%g ."}}, stdout: srv.cfg.Workdir + "\n0:0\n"},
		{name: "credentials", req: wire.ExecRequest{Argv: []string{"sh", "-c", "id -u; id -g; id -G"}, UID: 1000, GID: 1001, Cwd: "/"}, stdout: "1000\n1001\n1001\n"},
		{name: "relative path", req: wire.ExecRequest{Argv: []string{"./echo", "hi"}, Cwd: "/bin"}, stdout: "hi\n"},
		{name: "no stdin", req: wire.ExecRequest{Argv: []string{"cat"}}},
		{name: "large", req: wire.ExecRequest{Argv: []string{"sh", "-c", "head -c 1000000 /dev/zero"}}, stdout: string(make([]byte, 1000000))},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.ID = fmt.Sprintf("exec-%d", i)
			r := run(t, c, tt.req)
			if r.stdout != tt.stdout || r.stderr != tt.stderr {
				t.Errorf("stdout %q stderr %q, want %q and %q", trunc(r.stdout), trunc(r.stderr), trunc(tt.stdout), tt.stderr)
			}
			if tt.chunks != nil && fmt.Sprint(r.chunks) != fmt.Sprint(tt.chunks) {
				t.Errorf("chunks %q, want %q", r.chunks, tt.chunks)
			}
			if r.exit != tt.exit {
				t.Errorf("exit %+v, want %+v", r.exit, tt.exit)
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

func TestExecErrors(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	ctx := t.Context()
	run(t, c, wire.ExecRequest{ID: "done", Argv: []string{"true"}})
	if _, err := c.Exec(ctx, wire.ExecRequest{ID: "sleeper", Argv: []string{"sleep", "1000"}, Env: []string{testPath}}); err != nil {
		t.Fatal(err)
	}
	defer c.Signal(ctx, "sleeper", "KILL")

	tests := []struct {
		name string
		call func() error
		code string
		msg  string
	}{
		{"empty argv", exec(c, wire.ExecRequest{ID: "x"}), wire.CodeInvalidArgument, "argv"},
		{"empty id", exec(c, wire.ExecRequest{Argv: []string{"true"}}), wire.CodeInvalidArgument, "id"},
		{"long id", exec(c, wire.ExecRequest{ID: strings.Repeat("a", 65), Argv: []string{"true"}}), wire.CodeInvalidArgument, "id"},
		{"bad id", exec(c, wire.ExecRequest{ID: "a/b", Argv: []string{"true"}}), wire.CodeInvalidArgument, "id"},
		{"not found", exec(c, wire.ExecRequest{ID: "x", Argv: []string{"foo-no-such"}, Env: []string{testPath}}), wire.CodeInvalidArgument, "executable file not found: foo-no-such"},
		{"not in PATH", exec(c, wire.ExecRequest{ID: "x", Argv: []string{"sh"}, Env: []string{"PATH=/nonexistent"}}), wire.CodeInvalidArgument, "executable file not found: sh"},
		{"no cwd", exec(c, wire.ExecRequest{ID: "x", Argv: []string{"true"}, Cwd: "/x/y", Env: []string{testPath}}), wire.CodeInvalidArgument, "working directory /x/y does not exist"},
		{"relative cwd", exec(c, wire.ExecRequest{ID: "x", Argv: []string{"true"}, Cwd: "tmp"}), wire.CodeInvalidArgument, "cwd"},
		{"negative timeout", exec(c, wire.ExecRequest{ID: "x", Argv: []string{"true"}, TimeoutMS: -1}), wire.CodeInvalidArgument, "timeout"},
		{"bad pty", exec(c, wire.ExecRequest{ID: "x", Argv: []string{"true"}, PTY: &wire.Size{}}), wire.CodeInvalidArgument, "pty"},
		{"bad env", exec(c, wire.ExecRequest{ID: "x", Argv: []string{"true"}, Env: []string{"NOEQUALS"}}), wire.CodeInvalidArgument, "env"},
		{"duplicate", exec(c, wire.ExecRequest{ID: "done", Argv: []string{"true"}, Env: []string{testPath}}), wire.CodeConflict, "already exists"},
		{"output unknown", func() error { _, err := c.Output(ctx, "nope", 0); return err }, wire.CodeNotFound, "nope"},
		{"output beyond", func() error { _, err := c.Output(ctx, "done", 99); return err }, wire.CodeInvalidArgument, "beyond"},
		{"signal unknown id", func() error { return c.Signal(ctx, "nope", "TERM") }, wire.CodeNotFound, ""},
		{"bad signal", func() error { return c.Signal(ctx, "sleeper", "BOGUS") }, wire.CodeInvalidArgument, "unknown signal"},
		{"signal ended", func() error { return c.Signal(ctx, "done", "TERM") }, wire.CodeConflict, "exited"},
		{"resize no pty", func() error { return c.Resize(ctx, "sleeper", wire.Size{Cols: 10, Rows: 10}) }, wire.CodeConflict, "terminal"},
		{"resize bad", func() error { return c.Resize(ctx, "sleeper", wire.Size{}) }, wire.CodeInvalidArgument, "size"},
		{"stdin no pipe", func() error { return c.Stdin(ctx, "sleeper", strings.NewReader("x"), true) }, wire.CodeConflict, "stdin"},
		{"stdin unknown", func() error { return c.Stdin(ctx, "nope", nil, true) }, wire.CodeNotFound, ""},
		{"forget running", func() error { return c.Forget(ctx, "sleeper") }, wire.CodeConflict, "running"},
		{"forget unknown", func() error { return c.Forget(ctx, "nope") }, wire.CodeNotFound, ""},
		{"ack beyond", func() error { return c.Ack(ctx, "done", 5) }, wire.CodeInvalidArgument, "beyond"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var e *api.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v, want an *api.Error", err)
			}
			if string(e.Code) != tt.code || !strings.Contains(e.Message, tt.msg) {
				t.Errorf("error %+v, want %s %q", e, tt.code, tt.msg)
			}
		})
	}
}

func exec(c *client.Client, req wire.ExecRequest) func() error {
	return func() error {
		_, err := c.Exec(context.Background(), req)
		return err
	}
}

func TestTimeout(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	st, err := c.Exec(t.Context(), wire.ExecRequest{ID: "slow", Argv: []string{"sh", "-c", "sleep 1000 & sleep 1000"}, Env: []string{testPath}, TimeoutMS: 300})
	if err != nil {
		t.Fatal(err)
	}
	// The exit says the agent's timeout killed the group (sleep 1000 would
	// not end by itself): no clock is needed to tell.
	r := collect(t, c, "slow", 0)
	if want := (wire.ExitData{ExitCode: -1, Signal: "KILL", TimedOut: true}); r.exit != want {
		t.Errorf("exit %+v, want %+v", r.exit, want)
	}
	if left := groupLeft(st.PID); len(left) > 0 {
		t.Errorf("process group %d still has %v", st.PID, left)
	}
}

func TestSignal(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	tests := []struct {
		sig  string
		want wire.ExitData
	}{
		{"TERM", wire.ExitData{ExitCode: -1, Signal: "TERM"}},
		{"SIGINT", wire.ExitData{ExitCode: -1, Signal: "INT"}},
		{"kill", wire.ExitData{ExitCode: -1, Signal: "KILL"}},
		{"HUP", wire.ExitData{ExitCode: -1, Signal: "HUP"}},
	}
	for i, tt := range tests {
		t.Run(tt.sig, func(t *testing.T) {
			id := fmt.Sprintf("sig-%d", i)
			if _, err := c.Exec(t.Context(), wire.ExecRequest{ID: id, Argv: []string{"sleep", "1000"}, Env: []string{testPath}}); err != nil {
				t.Fatal(err)
			}
			if err := c.Signal(t.Context(), id, tt.sig); err != nil {
				t.Fatal(err)
			}
			if r := collect(t, c, id, 0); r.exit != tt.want {
				t.Errorf("exit %+v, want %+v", r.exit, tt.want)
			}
		})
	}
	t.Run("stop and continue", func(t *testing.T) {
		if _, err := c.Exec(t.Context(), wire.ExecRequest{ID: "stopcont", Argv: []string{"sh", "-c", "sleep 0.3; echo done"}, Env: []string{testPath}}); err != nil {
			t.Fatal(err)
		}
		for _, sig := range []string{"STOP", "CONT"} {
			if err := c.Signal(t.Context(), "stopcont", sig); err != nil {
				t.Fatal(err)
			}
		}
		if r := collect(t, c, "stopcont", 0); r.stdout != "done\n" || r.exit != (wire.ExitData{}) {
			t.Errorf("got %+v", r)
		}
	})
}

func TestStdin(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	ctx := t.Context()
	t.Run("chunks", func(t *testing.T) {
		if _, err := c.Exec(ctx, wire.ExecRequest{ID: "sum", Argv: []string{"sh", "-c", "while read l; do s=$((s+l)); done; echo $s"}, Env: []string{testPath}, Stdin: true}); err != nil {
			t.Fatal(err)
		}
		for i, chunk := range []string{"1\n2\n", "3\n4", "0\n5\n"} {
			if err := c.Stdin(ctx, "sum", strings.NewReader(chunk), i == 2); err != nil {
				t.Fatal(err)
			}
		}
		if r := collect(t, c, "sum", 0); r.stdout != "51\n" {
			t.Errorf("stdout %q, want 51", r.stdout)
		}
		if err := c.Stdin(ctx, "sum", strings.NewReader("1\n"), false); !isCode(err, wire.CodeConflict) {
			t.Errorf("stdin after eof: %v, want conflict", err)
		}
	})
	t.Run("large streamed body", func(t *testing.T) {
		if _, err := c.Exec(ctx, wire.ExecRequest{ID: "wc", Argv: []string{"wc", "-c"}, Env: []string{testPath}, Stdin: true}); err != nil {
			t.Fatal(err)
		}
		pr, pw := io.Pipe()
		var wg sync.WaitGroup
		wg.Go(func() {
			buf := make([]byte, 100_000)
			for range 100 {
				if _, err := pw.Write(buf); err != nil {
					break
				}
			}
			pw.Close()
		})
		err := c.Stdin(ctx, "wc", pr, true)
		pr.Close()
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if r := collect(t, c, "wc", 0); r.stdout != "10000000\n" {
			t.Errorf("stdout %q", r.stdout)
		}
	})
}

func isCode(err error, code string) bool {
	var e *api.Error
	return errors.As(err, &e) && string(e.Code) == code
}

func seqOutput(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.String()
}

func TestResume(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	ctx := t.Context()
	if _, err := c.Exec(ctx, wire.ExecRequest{ID: "seq", Argv: []string{"seq", "1", "100000"}, Env: []string{testPath}}); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	readSome := func(after int64, n int) int64 {
		s, err := c.Output(ctx, "seq", after)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		last := after
		for got.Len() < n {
			f, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if f.Kind != wire.FrameStdout {
				t.Fatalf("frame kind %d", f.Kind)
			}
			got.Write(f.Data)
			last = f.Seq
		}
		return last
	}
	last := readSome(0, 100_000)
	// A reader that goes away loses nothing: the same `after` gives the
	// same frames again.
	mark := got.Len()
	readSome(last, mark+1)
	got.Truncate(mark)

	r := collect(t, c, "seq", last)
	got.WriteString(r.stdout)
	if want := seqOutput(100000); got.String() != want {
		t.Errorf("got %d bytes, want %d (equal prefix: %v)", got.Len(), len(want), strings.HasPrefix(want, got.String()))
	}
	if r.exit != (wire.ExitData{}) {
		t.Errorf("exit %+v", r.exit)
	}

	// Everything up to `last` is acknowledged now.
	_, err := c.Output(ctx, "seq", last-1)
	if !isCode(err, wire.CodeConflict) || !strings.Contains(err.Error(), fmt.Sprintf("output before seq %d was already acknowledged", last+1)) {
		t.Errorf("output before the acknowledged: %v", err)
	}
	// After the exit frame there is nothing more.
	s, err := c.Output(ctx, "seq", r.lastSeq)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Errorf("after the exit frame: %v, want EOF", err)
	}
	s.Close()

	sts, err := c.Commands(ctx)
	if err != nil || len(sts) != 1 || sts[0].ID != "seq" || sts[0].Running || sts[0].LastSeq != r.lastSeq {
		t.Errorf("commands %+v, %v", sts, err)
	}
	if err := c.Forget(ctx, "seq"); err != nil {
		t.Fatal(err)
	}
	if sts, err := c.Commands(ctx); err != nil || len(sts) != 0 {
		t.Errorf("commands after forget %+v, %v", sts, err)
	}
}

func TestBackPressure(t *testing.T) {
	srv, c := startServer(t, ServerConfig{})
	ctx := t.Context()
	const total = 50 << 20
	line := "0123456789abcdef\n"
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := c.Exec(ctx, wire.ExecRequest{ID: "big", Argv: []string{"sh", "-c", fmt.Sprintf("yes %s | head -c %d", strings.TrimSpace(line), total)}, Env: []string{testPath}}); err != nil {
		t.Fatal(err)
	}
	// Wait until the buffer is full (no room for another whole frame) and
	// the output stops growing: the command is blocked, not ended. How long
	// that takes depends on the machine's load, so only the state counts.
	full := DefaultMaxBuffer - wire.MaxFrameData - 64 // 64: a frame's overhead in FrameCost
	var last int64 = -1
	for {
		time.Sleep(50 * time.Millisecond)
		srv.mu.Lock()
		buffered := srv.cmds["big"].out.buffered()
		srv.mu.Unlock()
		if buffered > DefaultMaxBuffer {
			t.Fatalf("buffered %d, more than the buffer's %d", buffered, DefaultMaxBuffer)
		}
		sts, err := c.Commands(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !sts[0].Running {
			t.Fatal("command ended while nobody read its output")
		}
		if buffered >= full && sts[0].LastSeq == last {
			break
		}
		last = sts[0].LastSeq
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 3*DefaultMaxBuffer {
		t.Errorf("heap grew by %d bytes", grew)
	}

	s, err := c.Output(ctx, "big", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var n int
	var tail []byte // the start of an incomplete line
	for {
		f, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.Kind == wire.FrameExit {
			if e, _ := wire.ParseExit(f.Data); e != (wire.ExitData{}) {
				t.Errorf("exit %+v", e)
			}
			continue
		}
		n += len(f.Data)
		data := append(tail, f.Data...)
		k := len(data) / len(line) * len(line)
		if string(data[:k]) != strings.Repeat(line, k/len(line)) {
			t.Fatalf("bad data near byte %d", n)
		}
		tail = append([]byte(nil), data[k:]...)
	}
	if n != total {
		t.Errorf("got %d bytes, want %d", n, total)
	}
}

func TestPTY(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	ctx := t.Context()
	r := run(t, c, wire.ExecRequest{ID: "tty", Argv: []string{"tty"}, PTY: &wire.Size{Cols: 80, Rows: 24}})
	if !regexp.MustCompile(`^/dev/pts/\d+\r\n$`).MatchString(r.stdout) || r.exit != (wire.ExitData{}) {
		t.Errorf("tty: %q %+v", r.stdout, r.exit)
	}

	if _, err := c.Exec(ctx, wire.ExecRequest{ID: "size", Argv: []string{"sh", "-c", "stty size; read x; stty size"}, Env: []string{testPath}, PTY: &wire.Size{Cols: 80, Rows: 24}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(ctx, "size", wire.Size{Cols: 120, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	if err := c.Stdin(ctx, "size", strings.NewReader("go\n"), false); err != nil {
		t.Fatal(err)
	}
	r = collect(t, c, "size", 0)
	if !strings.HasSuffix(r.stdout, "40 120\r\n") {
		t.Errorf("stty size after resize: %q", r.stdout)
	}
	if r.stderr != "" {
		t.Errorf("stderr frames with a terminal: %q", r.stderr)
	}

	// ^D ends the input of a terminal's reader; signals reach the session.
	if _, err := c.Exec(ctx, wire.ExecRequest{ID: "cat", Argv: []string{"cat"}, Env: []string{testPath}, PTY: &wire.Size{Cols: 80, Rows: 24}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Stdin(ctx, "cat", strings.NewReader("hello\n"), true); err != nil {
		t.Fatal(err)
	}
	if r := collect(t, c, "cat", 0); r.stdout != "hello\r\nhello\r\n" || r.exit != (wire.ExitData{}) {
		t.Errorf("cat: %q %+v", r.stdout, r.exit)
	}
}

func TestOrphanReaping(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	r := run(t, c, wire.ExecRequest{ID: "orphan", Argv: []string{"sh", "-c", `sh -c 'sleep 1000 </dev/null >/dev/null 2>&1 & echo $!'`}})
	pid, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if err != nil {
		t.Fatalf("stdout %q", r.stdout)
	}
	st, err := readStat(pid)
	if err != nil {
		t.Fatalf("orphan %d: %v", pid, err)
	}
	if st.ppid != os.Getpid() {
		t.Errorf("orphan's parent is %d, want the agent %d", st.ppid, os.Getpid())
	}
	// Once it exits, the agent reaps it. Wait for the state, not for a
	// clock: a reaper that never reaps shows as this test hanging here.
	if err := syscallKill(pid); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := readStat(pid); errors.Is(err, os.ErrNotExist) {
			return // exited and reaped
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBackgroundKeepsOutputOpen(t *testing.T) {
	_, c := startServer(t, ServerConfig{ExitGrace: 300 * time.Millisecond})
	tests := []struct {
		name   string
		pty    *wire.Size
		stdout string
	}{
		{"pipes", nil, "started\n"},
		// The background process ignores the hangup of the terminal.
		{"terminal", &wire.Size{Cols: 80, Rows: 24}, "started\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "bg-" + tt.name
			st, err := c.Exec(t.Context(), wire.ExecRequest{ID: id, Argv: []string{"sh", "-c", "trap '' HUP; sleep 1000 & echo started"}, Env: []string{testPath}, PTY: tt.pty})
			if err != nil {
				t.Fatal(err)
			}
			// The exit frame arrives while the background process still
			// holds the output open (checked below): the grace period
			// ended the reads, not the end of the output.
			r := collect(t, c, id, 0)
			if r.stdout != tt.stdout || r.exit != (wire.ExitData{}) {
				t.Errorf("got %q %+v", r.stdout, r.exit)
			}
			// The background process is left running (it is not a
			// timeout); clean it up.
			if left := inGroup(st.PID); len(left) != 1 {
				t.Errorf("group: %v", left)
			}
			if err := syscallKill(-st.PID); err != nil {
				t.Fatal(err)
			}
			for len(inGroup(st.PID)) > 0 {
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func TestConcurrent(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("c%d", i)
			_, err := c.Exec(t.Context(), wire.ExecRequest{
				ID:   id,
				Argv: []string{"sh", "-c", `i=0; while [ $i -lt 200 ]; do echo "$ID $i"; echo "err $ID $i" >&2; i=$((i+1)); done`},
				Env:  []string{testPath, "ID=" + id},
			})
			if err != nil {
				t.Error(err)
				return
			}
			s, err := c.Output(t.Context(), id, 0)
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			var out, errb strings.Builder
			for {
				f, err := s.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Error(err)
					return
				}
				switch f.Kind {
				case wire.FrameStdout:
					out.Write(f.Data)
				case wire.FrameStderr:
					errb.Write(f.Data)
				}
			}
			var wantOut, wantErr strings.Builder
			for j := range 200 {
				fmt.Fprintf(&wantOut, "%s %d\n", id, j)
				fmt.Fprintf(&wantErr, "err %s %d\n", id, j)
			}
			if out.String() != wantOut.String() || errb.String() != wantErr.String() {
				t.Errorf("%s: output tangled: %q / %q", id, trunc(out.String()), trunc(errb.String()))
			}
		})
	}
	wg.Wait()
}

func TestKillAll(t *testing.T) {
	srv, c := startServer(t, ServerConfig{})
	st, err := c.Exec(t.Context(), wire.ExecRequest{ID: "s", Argv: []string{"sh", "-c", "sleep 1000 & sleep 1000"}, Env: []string{testPath}})
	if err != nil {
		t.Fatal(err)
	}
	srv.KillAll()
	r := collect(t, c, "s", 0)
	if r.exit.Signal != "KILL" {
		t.Errorf("exit %+v", r.exit)
	}
	if left := groupLeft(st.PID); len(left) > 0 {
		t.Errorf("group left: %v", left)
	}
	if p, err := c.Ping(t.Context()); err != nil || p.PID != os.Getpid() || p.Version != wire.Version {
		t.Errorf("ping %+v %v", p, err)
	}
}

// TestNoDescriptorLeak: an ended command keeps no descriptor open.
func TestNoDescriptorLeak(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	countFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	run(t, c, wire.ExecRequest{ID: "warm", Argv: []string{"true"}}) // opens the connections
	before := countFDs()
	for i := range 20 {
		req := wire.ExecRequest{ID: fmt.Sprintf("fd-%d", i), Argv: []string{"cat"}, Stdin: i%2 == 0}
		if i%3 == 0 {
			req.PTY = &wire.Size{Cols: 80, Rows: 24}
		}
		if _, err := c.Exec(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		if req.Stdin || req.PTY != nil {
			if err := c.Stdin(t.Context(), req.ID, strings.NewReader("x\n"), true); err != nil {
				t.Fatal(err)
			}
		}
		collect(t, c, req.ID, 0)
		if err := c.Forget(t.Context(), req.ID); err != nil {
			t.Fatal(err)
		}
	}
	if after := countFDs(); after > before+4 {
		t.Errorf("%d descriptors open after 20 commands, %d before", after, before)
	}
}

// TestSlowReaderAfterExit: output still in the pipe when the command exits,
// behind a full buffer, is read once the host reads, however late.
func TestSlowReaderAfterExit(t *testing.T) {
	_, c := startServer(t, ServerConfig{ExitGrace: 100 * time.Millisecond})
	// The buffer holds a little less than its bound, the reader one more
	// frame, the pipe 64 KiB: head can write this much and exit.
	const total = DefaultMaxBuffer + 32<<10
	st, err := c.Exec(t.Context(), wire.ExecRequest{ID: "burst", Argv: []string{"head", "-c", strconv.Itoa(total), "/dev/zero"}, Env: []string{testPath}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if _, err := readStat(st.PID); !errors.Is(err, os.ErrNotExist) {
		t.Logf("head has not exited (%v): the case is not exercised", err)
	}
	r := collect(t, c, "burst", 0)
	if len(r.stdout) != total || r.exit != (wire.ExitData{}) {
		t.Errorf("got %d bytes, exit %+v; want %d", len(r.stdout), r.exit, total)
	}
}

// TestExecStreamsOutput: a start that asks for the output stream gets it
// in the same answer, from the first frame to the exit, with the status;
// the command is known to the agent as any other (its output can be read
// again, it can be forgotten).
func TestExecStreamsOutput(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	tests := []struct {
		argv           []string
		stdout, stderr string
		exit           wire.ExitData
	}{
		{[]string{"true"}, "", "", wire.ExitData{}},
		{[]string{"sh", "-c", "echo a; echo b >&2; exit 5"}, "a\n", "b\n", wire.ExitData{ExitCode: 5}},
		{[]string{"sh", "-c", "head -c 300000 /dev/zero"}, string(make([]byte, 300000)), "", wire.ExitData{}},
	}
	for i, tt := range tests {
		id := fmt.Sprintf("stream-%d", i)
		st, s, err := c.ExecOutput(t.Context(), wire.ExecRequest{ID: id, Argv: tt.argv, Env: []string{testPath}})
		if err != nil {
			t.Fatal(err)
		}
		if s == nil {
			t.Fatalf("%v: the agent answered no output stream", tt.argv)
		}
		if st.ID != id || st.PID <= 0 {
			t.Errorf("%v: status %+v", tt.argv, st)
		}
		r := readStream(t, s)
		if r.stdout != tt.stdout || r.stderr != tt.stderr || r.exit != tt.exit {
			t.Errorf("%v: stdout %q stderr %q exit %+v; want %q, %q, %+v", tt.argv, trunc(r.stdout), r.stderr, r.exit, trunc(tt.stdout), tt.stderr, tt.exit)
		}
		if again := collect(t, c, id, 0); again.stdout != r.stdout || again.exit != r.exit {
			t.Errorf("%v: read again: %q %+v", tt.argv, trunc(again.stdout), again.exit)
		}
		if err := c.Forget(t.Context(), id); err != nil {
			t.Error(err)
		}
	}
	// A start refused answers its error, no stream.
	if _, s, err := c.ExecOutput(t.Context(), wire.ExecRequest{ID: "stream-bad", Argv: []string{"no-such-program"}, Env: []string{testPath}}); !isCode(err, string(api.CodeInvalidArgument)) || s != nil {
		t.Errorf("a program not found: %v, stream %v; want invalid_argument", err, s)
	}
}
