package snapshots

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// cli runs the real cove binary against s (its first start's CLI config)
// and returns stdout, stderr and the exit code.
func cli(t *testing.T, s *e2etest.Server, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), args...)
	cmd.Env = append(os.Environ(), "HOME="+s.Home, "COVE_URL=", "COVE_API_KEY=")
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

// TestCLI: cove snapshot create, ls, restore, rm and cove fork against a
// real server; a refusal is one readable line and a non-zero exit.
func TestCLI(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--max-fork", "3"))
	c := s.Admin
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "cli"})
	e2etest.MustOK(t, c, sb.ID, "echo kept > /workspace/k")

	out, errOut, code := cli(t, s, "snapshot", "create", "cli", "cli-snap")
	if code != 0 || !strings.HasPrefix(out, "snap_") || !strings.Contains(out, " cli-snap ") {
		t.Fatalf("snapshot create: %d %q %q", code, out, errOut)
	}
	if out, _, code := cli(t, s, "snapshot", "ls", "--sandbox", "cli"); code != 0 || !strings.Contains(out, "cli-snap") || !strings.HasPrefix(out, "ID") {
		t.Errorf("snapshot ls: %d %q", code, out)
	}
	e2etest.MustOK(t, c, sb.ID, "rm -rf /workspace/k")
	if out, errOut, code := cli(t, s, "snapshot", "restore", "cli", "cli-snap"); code != 0 || out != sb.ID+" running\n" {
		t.Fatalf("snapshot restore: %d %q %q", code, out, errOut)
	}
	if out := e2etest.MustOK(t, c, sb.ID, "cat /workspace/k"); out != "kept\n" {
		t.Errorf("after restore: %q", out)
	}
	out, errOut, code = cli(t, s, "fork", "cli", "-n", "2", "--names", "fa,fb")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasSuffix(lines[0], " running") {
		t.Fatalf("fork: %d %q %q", code, out, errOut)
	}
	if got, err := c.GetSandbox(t.Context(), "fb"); err != nil || got.State != api.StateRunning {
		t.Errorf("fork fb: %+v %v", got, err)
	}
	// Refusals: one line, non-zero.
	for _, args := range [][]string{
		{"fork", "cli", "-n", "4"},
		{"snapshot", "rm", "cli-snap"},
		{"snapshot", "get", "nope"},
	} {
		out, errOut, code := cli(t, s, args...)
		if code == 0 || out != "" || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || errOut == "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}
