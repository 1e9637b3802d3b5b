package volumes

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestCLI: cove volume create, ls, get, rm and cove create --volume
// against a real server; a refusal is one readable line and a non-zero
// exit.
func TestCLI(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	c := s.Admin
	out, errOut, code := cli(t, s, "volume", "create", "clivol", "--size-mib", "16")
	if code != 0 || !strings.HasPrefix(out, "vol_") || !strings.HasSuffix(out, " clivol 16\n") {
		t.Fatalf("volume create: %d %q %q", code, out, errOut)
	}
	if _, _, code := cli(t, s, "volume", "create", "other", "--size-mib", "16"); code != 0 {
		t.Fatal("volume create other")
	}
	if out, errOut, code := cli(t, s, "create", "--name", "withvol", "--volume", "clivol:/data", "--volume", "other:/ro:ro"); code != 0 {
		t.Fatalf("create --volume: %d %q %q", code, out, errOut)
	}
	sb, err := c.GetSandbox(t.Context(), "withvol")
	if err != nil || len(sb.Volumes) != 2 || sb.Volumes[0].Path != "/data" || sb.Volumes[0].ReadOnly || sb.Volumes[1].Path != "/ro" || !sb.Volumes[1].ReadOnly {
		t.Fatalf("the sandbox: %+v %v", sb.Volumes, err)
	}
	if out, _, code := cli(t, s, "volume", "ls"); code != 0 || !strings.HasPrefix(out, "ID") || !strings.Contains(out, "clivol") || !strings.Contains(out, sb.ID) {
		t.Errorf("volume ls: %d %q", code, out)
	}
	if out, _, code := cli(t, s, "volume", "get", "clivol"); code != 0 || !strings.Contains(out, `"size_mib": 16`) {
		t.Errorf("volume get: %d %q", code, out)
	}
	// Refusals: one line, non-zero.
	for _, args := range [][]string{
		{"volume", "rm", "clivol"}, // mounted
		{"volume", "get", "nope"},
		{"volume", "create", "small", "--size-mib", "8"},
		{"create", "--volume", "clivol"},
		{"create", "--volume", "clivol:/proc"},
		{"create", "--volume", "nope:/data"},
		{"create", "--volume", "clivol:/a", "--volume", "clivol:/b"},
	} {
		out, errOut, code := cli(t, s, args...)
		if code == 0 || out != "" || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || errOut == "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	if _, err := c.TerminateSandbox(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(t.Context(), sb.ID, api.StateTerminated, time.Minute); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := cli(t, s, "volume", "rm", "clivol"); code != 0 || out != "clivol deleted\n" {
		t.Errorf("volume rm: %d %q %q", code, out, errOut)
	}
}
