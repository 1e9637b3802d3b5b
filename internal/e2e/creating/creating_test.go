// Package creating tests what changes while a sandbox is still creating
// against a real `cove serve`: the network policy a PATCH sets then is the
// one the sandbox runs under.
package creating

import (
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// TestPolicyPatchedWhileCreating allows a name at create, PATCHes the
// policy to allow nothing while the sandbox is creating, and checks that
// the running sandbox cannot resolve the name. The name is one the
// server's resolver answers itself (--dns-static), so nothing leaves the
// node either way.
func TestPolicyPatchedWhileCreating(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--dns-static", "allowed.test=192.0.2.10"))
	c := s.Admin
	lookup := "nslookup allowed.test >/dev/null 2>&1 && echo RESOLVED || echo REFUSED"

	// Without a PATCH the name resolves: the check below can tell.
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"allowed.test"}}})
	if got := e2etest.MustOK(t, c, sb.ID, lookup); got != "RESOLVED\n" {
		t.Fatalf("allowed name before any PATCH: %q", got)
	}

	// The PATCH must land while the sandbox is creating; a start that wins
	// the race is retried with a new sandbox.
	for attempt := 0; ; attempt++ {
		if attempt == 10 {
			t.Skip("every sandbox was running before its PATCH landed; nothing was tested")
		}
		sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"allowed.test"}}}, false)
		if err != nil {
			t.Fatal(err)
		}
		patched, err := c.UpdateSandbox(t.Context(), sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{}}})
		if err != nil {
			t.Fatal(err)
		}
		running, err := c.WaitSandbox(t.Context(), sb.ID, api.StateRunning, 2*time.Minute)
		if err != nil || running.State != api.StateRunning {
			t.Fatalf("sandbox %s: %+v, %v", sb.ID, running, err)
		}
		if patched.State != api.StateCreating {
			continue
		}
		if len(running.Network.Allow) != 0 {
			t.Fatalf("stored policy after the PATCH: %v", running.Network.Allow)
		}
		got := e2etest.MustOK(t, c, sb.ID, lookup)
		if strings.TrimSpace(got) != "REFUSED" {
			t.Fatalf("a name allowed only before the PATCH (made while creating): %q", got)
		}
		t.Logf("PATCH landed while creating on attempt %d", attempt+1)
		return
	}
}
