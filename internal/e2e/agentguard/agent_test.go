package agentguard

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// buildProbe builds testdata/probe static for the sandbox.
func buildProbe(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "probe")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, out)
	}
	return bin
}

// TestSandboxRootCannotReachTheAgent: root in a sandbox cannot read the
// agent's environment or memory, take its listening socket (descriptor 3)
// with pidfd_getfd, or ptrace it; the same probe reaches a process of its
// own, which stays dumpable (debuggers in the sandbox work).
func TestSandboxRootCannotReachTheAgent(t *testing.T) {
	s := e2etest.StartServer(t)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	f, err := os.Open(buildProbe(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := s.Admin.WriteFile(t.Context(), sb.ID, "/tmp/probe", f, cove.AsUser("root"), cove.WithMode("0755")); err != nil {
		t.Fatal(err)
	}
	out := e2etest.MustOK(t, s.Admin, sb.ID, "/tmp/probe", e2etest.AsRoot)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	t.Logf("probe:\n%s", out)
	for _, k := range []string{"agent-environ", "agent-mem", "agent-pidfd-getfd-3", "agent-ptrace-seize", "agent-ptrace-attach"} {
		if v, ok := got[k]; !ok || v == "ok" {
			t.Errorf("sandbox root: %s = %q, want refused", k, v)
		}
	}
	// The probe itself, and a child it started, are dumpable: their own
	// tools reach them.
	for _, k := range []string{"child-environ", "child-mem", "child-ptrace-seize"} {
		if got[k] != "ok" {
			t.Errorf("sandbox root on its own child: %s = %q, want ok", k, got[k])
		}
	}
	if got["self-dumpable"] != "1" {
		t.Errorf("a command of the agent: dumpable %q, want 1", got["self-dumpable"])
	}
}
