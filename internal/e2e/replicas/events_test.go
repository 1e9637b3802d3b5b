package replicas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// TestEventsAcrossReplicas follows the team's event stream (SSE) on
// replica A while a sandbox is driven through replica B: A's stream sees
// every event of the sandbox, in the order B's log has them.
func TestEventsAcrossReplicas(t *testing.T) {
	f, _ := startFleet(t)
	a, b := f.Controls[0], f.Controls[1]
	run := e2etest.RunID()
	ctx := t.Context()

	// The stream starts after the newest event so far: what it shows of
	// the sandbox all happens after it is open or while it opens.
	last := ""
	for {
		page, err := b.Admin.Events(ctx, cove.EventQuery{After: last, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) == 0 {
			break
		}
		last = page.Items[len(page.Items)-1].ID
	}
	streamCtx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var seen []api.Event
	arrived := map[string]time.Time{}
	var wg sync.WaitGroup
	var streamErr error
	wg.Go(func() {
		streamErr = a.Admin.FollowEvents(streamCtx, cove.EventQuery{After: last}, func(e api.Event) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, e)
			arrived[e.ID] = time.Now()
			return nil
		})
	})
	defer wg.Wait()

	sb := e2etest.Create(t, b.Admin, api.CreateSandboxRequest{Name: "ev-" + run})
	e2etest.MustOK(t, b.Admin, sb.ID, "echo one")
	if _, err := b.Admin.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admin.WaitSandbox(ctx, sb.ID, api.StateAsleep, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admin.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admin.WaitSandbox(ctx, sb.ID, api.StateRunning, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	e2etest.MustOK(t, b.Admin, sb.ID, "echo two")
	if _, err := b.Admin.TerminateSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admin.WaitSandbox(ctx, sb.ID, api.StateTerminated, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	page, err := b.Admin.Events(ctx, cove.EventQuery{Sandbox: sb.ID, Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	want := ids(page.Items)
	if !slices.Contains(types(page.Items), "sandbox.terminated") || !slices.Contains(types(page.Items), "sandbox.asleep") {
		t.Fatalf("B's log of the sandbox: %v", types(page.Items))
	}
	ofSandbox := func() []api.Event {
		mu.Lock()
		defer mu.Unlock()
		var es []api.Event
		for _, e := range seen {
			if e.SandboxID == sb.ID {
				es = append(es, e)
			}
		}
		return es
	}
	waitFor(t, 30*time.Second, "A's stream shows the sandbox's events", func() (bool, string) {
		got := ofSandbox()
		return len(got) >= len(want), fmt.Sprintf("%v of %v", types(got), types(page.Items))
	})
	if got := ofSandbox(); !slices.Equal(ids(got), want) {
		t.Errorf("A's stream showed\n%v\nB's log has\n%v", types(got), types(page.Items))
	}
	mu.Lock()
	// How long after B appended each event A's stream had it: the
	// notification's latency, or the fallback poll's.
	var worst time.Duration
	for _, e := range page.Items {
		worst = max(worst, arrived[e.ID].Sub(e.Time))
	}
	t.Logf("%d events of the sandbox reached A's stream at most %v after B appended them", len(page.Items), worst)
	for i := 1; i < len(seen); i++ {
		if seen[i].ID <= seen[i-1].ID {
			t.Errorf("the stream went back: %s after %s", seen[i].ID, seen[i-1].ID)
		}
	}
	mu.Unlock()
	stop()
	wg.Wait()
	if streamErr != nil && !errors.Is(streamErr, context.Canceled) {
		t.Errorf("the stream ended with %v", streamErr)
	}
}

func ids(es []api.Event) []string {
	var s []string
	for _, e := range es {
		s = append(s, e.ID)
	}
	return s
}

func types(es []api.Event) []string {
	var s []string
	for _, e := range es {
		s = append(s, e.Type)
	}
	return s
}
