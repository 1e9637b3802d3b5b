package e2e

import (
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
)

// TestNetworkPatchWhileAsleep: a PATCH of the network policy of an asleep
// or sleeping sandbox answers at once with the policy stored, and the
// sandbox wakes under it on the node: a grant opens what was closed, a
// revocation closes what was open.
func TestNetworkPatchWhileAsleep(t *testing.T) {
	s, _, sb := netSandbox(t)
	ctx := t.Context()
	reach := func(want bool) {
		t.Helper()
		out, code, _ := try(t, s, sb.ID, curl+"http://web.test/")
		if got := code == 0 && out == "hello from web.test"; got != want {
			t.Errorf("web.test reached = %v (exit %d, %q); want %v", got, code, out, want)
		}
	}
	patch := func(allow ...string) api.Sandbox {
		t.Helper()
		got, err := s.Admin.UpdateSandbox(ctx, sb.ID, api.UpdateSandboxRequest{Network: &api.NetworkPolicy{Allow: allow}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Network.Allow) != len(allow) {
			t.Errorf("PATCH answered policy %v; want %v", got.Network.Allow, allow)
		}
		return got
	}
	settle := func(want api.SandboxState) {
		t.Helper()
		got, err := s.Admin.WaitSandbox(ctx, sb.ID, want, 2*time.Minute)
		if err != nil || got.State != want {
			t.Fatalf("sandbox is %s (%q, %v); want %s", got.State, got.StateReason, err, want)
		}
	}
	reach(false)

	// Asleep: the grant is stored and taken up by the wake.
	if _, err := s.Admin.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	settle(api.StateAsleep)
	if got := patch("web.test"); got.State != api.StateAsleep {
		t.Errorf("PATCH of an asleep sandbox left it %s", got.State)
	}
	if _, err := s.Admin.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	settle(api.StateRunning)
	reach(true)

	// Sleeping (the PATCH follows the sleep at once): the revocation
	// holds after the wake.
	if _, err := s.Admin.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := patch(); got.State != api.StateSleeping && got.State != api.StateAsleep {
		t.Errorf("PATCH after the sleep found it %s", got.State)
	}
	settle(api.StateAsleep)
	if _, err := s.Admin.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	settle(api.StateRunning)
	reach(false)
	if v, err := s.Admin.Network(ctx, sb.ID); err != nil || len(v.Policy.Allow) != 0 {
		t.Errorf("policy after the wake = %+v (%v); want none", v.Policy, err)
	}
}
