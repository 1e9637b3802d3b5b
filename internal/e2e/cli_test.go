package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// cli runs the real cove binary against s and returns stdout, stderr and
// the exit code.
func cli(t testing.TB, s *e2etest.Server, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), args...)
	// The config file written at first start is what the CLI uses.
	cmd.Env = append(os.Environ(), "HOME="+s.Home, "COVE_URL=", "COVE_API_KEY=")
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestCLI(t *testing.T) {
	s := e2etest.StartServer(t)
	out, errs, code := cli(t, s, "", "create", "--name", "demo", "--label", "team=core")
	if code != 0 || !strings.HasPrefix(out, "sbx_") {
		t.Fatalf("create: %q %q %d", out, errs, code)
	}
	id := strings.TrimSpace(out)

	tests := []struct {
		name       string
		stdin      string
		args       []string
		wantOut    string
		wantErr    string // substring of stderr
		wantCode   int
		errOneLine bool
	}{
		{"exec streams stdout and stderr", "", []string{"exec", "demo", "--", "sh", "-c", "echo out; echo err >&2"}, "out\n", "err\n", 0, false},
		{"exec passes the exit code", "", []string{"exec", "demo", "--", "sh", "-c", "exit 7"}, "", "", 7, false},
		{"exec forwards stdin", "1\n2\n3\n", []string{"exec", "demo", "--", "sh", "-c", "s=0; while read l; do s=$((s+l)); done; echo $s"}, "6\n", "", 0, false},
		{"exec with a signal", "", []string{"exec", "demo", "--", "sh", "-c", "kill -TERM $$"}, "", "", 128 + 15, false},
		{"exec by ID", "", []string{"exec", id, "--", "hostname"}, "demo\n", "", 0, false},
		{"exec a missing program", "", []string{"exec", "demo", "--", "/nope"}, "", "executable", 125, true},
		{"exec without --", "", []string{"exec", "demo", "true"}, "", "cove exec REF -- ARGV", 2, true},
		{"get a missing sandbox", "", []string{"get", "nosuch"}, "", "not found", 125, true},
		{"create with a bad name", "", []string{"create", "--name", "Bad Name"}, "", "invalid", 125, true},
		{"create with huge memory", "", []string{"create", "--memory", "999999999"}, "", "memory_mib", 125, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errs, code := cli(t, s, tt.stdin, tt.args...)
			if code != tt.wantCode || (tt.wantOut != "" && out != tt.wantOut) || !strings.Contains(errs, tt.wantErr) {
				t.Errorf("cove %v: stdout %q stderr %q code %d; want %q, %q, %d", tt.args, out, errs, code, tt.wantOut, tt.wantErr, tt.wantCode)
			}
			if tt.errOneLine && (strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "cove: ")) {
				t.Errorf("error is not one line starting with 'cove: ': %q", errs)
			}
		})
	}

	out, _, code = cli(t, s, "", "ls")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "running") {
		t.Errorf("ls: %q", out)
	}
	out, _, code = cli(t, s, "", "get", "demo", "--json")
	var sb api.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.ID != id || sb.Labels["team"] != "core" {
		t.Errorf("get --json: %q", out)
	}
	out, _, code = cli(t, s, "", "exec", "demo", "--detach", "--tag", "build step", "--", "sh", "-c", "echo detached")
	cmdID := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(cmdID, "cmd_") {
		t.Fatalf("exec --detach: %q %d", out, code)
	}
	if got, err := s.Admin.GetCommand(t.Context(), "demo", cmdID); err != nil || got.Tag != "build step" {
		t.Errorf("exec --tag: the command is %+v, %v; want tag %q", got, err, "build step")
	}
	out, _, code = cli(t, s, "", "logs", "demo", cmdID, "--follow")
	if code != 0 || out != "detached\n" {
		t.Errorf("logs --follow: %q %d", out, code)
	}
	// Ctrl-C detaches and says how to reattach; the command runs on.
	c := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), "exec", "demo", "--", "sh", "-c", "echo started; sleep 2; echo finished")
	c.Env = append(os.Environ(), "HOME="+s.Home)
	var mu sync.Mutex
	var cout, cerr bytes.Buffer
	c.Stdout, c.Stderr = e2etest.LockedWriter(&mu, &cout), e2etest.LockedWriter(&mu, &cerr)
	started := func() bool { mu.Lock(); defer mu.Unlock(); return strings.Contains(cout.String(), "started") }
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !started() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	c.Process.Signal(os.Interrupt)
	c.Wait()
	if c.ProcessState.ExitCode() != 130 || !strings.Contains(cerr.String(), "cove logs demo cmd_") {
		t.Errorf("Ctrl-C: code %d, stderr %q", c.ProcessState.ExitCode(), cerr.String())
	}
	if f := strings.Fields(cerr.String()[strings.Index(cerr.String(), "cove logs"):]); len(f) >= 4 {
		out, _, code := cli(t, s, "", "logs", "demo", f[3], "--follow")
		if code != 0 || out != "started\nfinished\n" {
			t.Errorf("after detaching, the command's output: %q %d", out, code)
		}
	}
	out, _, code = cli(t, s, "", "events", "--sandbox", "demo", "--type", "sandbox.running,command.exited")
	if code != 0 || !strings.Contains(out, "sandbox.running") || !strings.Contains(out, "command.exited") || strings.Contains(out, "command.started") {
		t.Errorf("events: %q %d", out, code)
	}
	out, _, code = cli(t, s, "", "sleep", "demo", "--wait")
	if code != 0 || out != id+" asleep\n" {
		t.Errorf("sleep --wait: %q %d", out, code)
	}
	if out, _, _ = cli(t, s, "", "ls"); !strings.Contains(out, "asleep") {
		t.Errorf("ls shows no asleep sandbox: %q", out)
	}
	out, _, code = cli(t, s, "", "wake", "demo", "--wait")
	if code != 0 || out != id+" running\n" {
		t.Errorf("wake --wait: %q %d", out, code)
	}
	out, _, code = cli(t, s, "", "rm", "demo")
	if code != 0 || !strings.Contains(out, "terminated") {
		t.Errorf("rm: %q %d", out, code)
	}
	out, _, _ = cli(t, s, "", "ls")
	if strings.Contains(out, id) {
		t.Errorf("ls after rm still shows it: %q", out)
	}
}

// TestManagedEnvironment is the quick start on the managed Debian image:
// python3, node and git work in one sandbox. The image is built once into
// COVE_TEST_IMAGES (make test sets it) and reused.
// TestVersionOfTheBuild: the binary `make build` made says which commit
// it was built from (Go records it from the checkout).
func TestVersionOfTheBuild(t *testing.T) {
	e2etest.RequireRoot(t)
	out, err := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^cove \S+ \(commit [0-9a-f]{7,}(-dirty)?, go[0-9.]+\S*\)\n$`).Match(out) {
		t.Errorf("cove --version printed %q, want the version, the commit it was built from and the Go version", out)
	}
}

func TestManagedEnvironment(t *testing.T) {
	e2etest.RequireRoot(t)
	if e2etest.ManagedDir() == "" {
		t.Skip("COVE_TEST_IMAGES is not set: `make test` sets it to build and cache the managed image")
	}
	s := e2etest.StartServer(t, e2etest.WithManaged)
	if out, errs, code := cli(t, s, "", "create", "--name", "demo"); code != 0 {
		t.Fatalf("create: %q %q", out, errs)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"python3", "-c", "print(6*7)"}, "42\n"},
		{[]string{"node", "-e", "console.log(6*7)"}, "42\n"},
		{[]string{"bash", "-lc", "cd /workspace && git init -q && git config user.email a@b && git config user.name a && echo hi > f && git add f && git commit -qm first && git log --format=%s"}, "first\n"},
		{[]string{"bash", "-lc", "whoami; echo $HOME; test -w /workspace && echo writable"}, "user\n/home/user\nwritable\n"},
	} {
		out, errs, code := cli(t, s, "", append([]string{"exec", "demo", "--"}, tt.args...)...)
		if code != 0 || out != tt.want {
			t.Errorf("cove exec demo -- %v: %q %q %d, want %q", tt.args, out, errs, code, tt.want)
		}
	}
	// stdin in three posts and an eof, summed by python.
	cmd, err := s.Admin.Exec(t.Context(), "demo", api.CreateCommandRequest{
		Argv: []string{"python3", "-c", "import sys; print(sum(map(int, sys.stdin)))"}, Stdin: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var parts [3]strings.Builder
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&parts[i*3/1001], "%d\n", i)
	}
	for i, p := range parts {
		if err := s.Admin.Stdin(t.Context(), "demo", cmd.ID, strings.NewReader(p.String()), i == 2); err != nil {
			t.Fatal(err)
		}
	}
	if out := outputOf(t, s.Admin, "demo", cmd.ID); out != "500500\n" {
		t.Errorf("python sum of stdin = %q", out)
	}
	// A shell string runs through bash -lc.
	res := e2etest.Sh(t, s.Admin, "demo", "echo $BASH_VERSION | cut -d. -f1; curl --version | head -c 4")
	if res.Stdout != "5\ncurl" {
		t.Errorf("bash and curl: %q %q", res.Stdout, res.Stderr)
	}
}
