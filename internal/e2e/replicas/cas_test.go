package replicas

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestConcurrentPatchAndSleep updates one sandbox through two replicas at
// once, a PATCH of its network through one and a sleep through the
// other, round after round: neither update is ever lost. A lost race may
// answer 409 conflict, which the client retries; in the end both are 2xx
// and both took effect, and the policy stored while it slept is the one
// it wakes with.
func TestConcurrentPatchAndSleep(t *testing.T) {
	f, _ := startFleet(t)
	c := newClient(t, f, f.Control.AdminKey)
	run := e2etest.RunID()
	a, b := f.Controls[0], f.Controls[1]
	id := decode[api.Sandbox](t, c.must(a.URL, "POST", "/v1/sandboxes?wait=running", "cas-create-"+run, "{}")).ID

	for round := range 4 {
		allow := []string{fmt.Sprintf("r%d.example.com", round)}
		// The two go through different replicas; which starts first
		// alternates.
		patchAt, sleepAt := a.URL, b.URL
		if round%2 == 1 {
			patchAt, sleepAt = sleepAt, patchAt
		}
		var wg sync.WaitGroup
		var patch, sleep answer
		var patchErr, sleepErr error
		wg.Go(func() {
			patch, patchErr = c.attempt(patchAt, "PATCH", "/v1/sandboxes/"+id, fmt.Sprintf("cas-patch-%s-%d", run, round),
				fmt.Sprintf(`{"network":{"allow":[%q]}}`, allow[0]))
		})
		wg.Go(func() {
			sleep, sleepErr = c.attempt(sleepAt, "POST", "/v1/sandboxes/"+id+"/sleep", fmt.Sprintf("cas-sleep-%s-%d", run, round), "")
		})
		wg.Wait()
		if patchErr != nil || sleepErr != nil {
			t.Fatalf("round %d: patch %v, sleep %v", round, patchErr, sleepErr)
		}
		if !patch.ok() || !sleep.ok() {
			t.Fatalf("round %d:\npatch %s\nsleep %s", round, patch, sleep)
		}
		t.Logf("round %d: patch retried %d times, sleep %d", round, patch.Retries, sleep.Retries)
		// Both effects are there, read through either replica.
		asleep := c.waitState(id, api.StateAsleep)
		if !slices.Equal(asleep.Network.Allow, allow) {
			t.Fatalf("round %d: asleep with network %v, want %v (the PATCH was lost)", round, asleep.Network.Allow, allow)
		}
		for _, r := range f.Controls {
			got, err := r.Admin.GetSandbox(t.Context(), id)
			if err != nil || got.State != api.StateAsleep || !slices.Equal(got.Network.Allow, allow) {
				t.Fatalf("round %d: %s reads %s %v (%v)", round, r.URL, got.State, got.Network.Allow, err)
			}
		}
		c.must("", "POST", "/v1/sandboxes/"+id+"/wake", fmt.Sprintf("cas-wake-%s-%d", run, round), "")
		woke := c.waitState(id, api.StateRunning)
		view, err := f.Running().Admin.Network(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(woke.Network.Allow, allow) || !slices.Equal(view.Policy.Allow, allow) {
			t.Fatalf("round %d: woke with network %v, policy %v; want %v", round, woke.Network.Allow, view.Policy.Allow, allow)
		}
	}
	checkReplays(t, f, c)
}
