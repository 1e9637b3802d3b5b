package lifecycle_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/store"
)

// attempt is the ctx of the first attempt of an idempotent request, and
// retry of a later one, which took the claim over: every attempt of the
// same claim derives the same IDs.
func attempt(t *testing.T, team string) context.Context {
	return id.WithDerivation(t.Context(), derivation(team))
}

func retry(t *testing.T, team string) context.Context {
	return id.WithDerivation(t.Context(), derivation(team).Resume())
}

func derivation(team string) *id.Derivation {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return id.NewDerivation([]byte("seed"), team, "k1", at)
}

// TestIdempotentCreatesRunOnce: a second attempt of a create whose IDs
// are derived from an Idempotency-Key (the first attempt's replica died
// before it answered) answers what the first made: one sandbox, one
// command on the node.
func TestIdempotentCreatesRunOnce(t *testing.T) {
	h := newHarness(t)
	first, err := h.srv.CreateSandbox(attempt(t, h.a), h.a, api.CreateSandboxRequest{Name: "once"})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, first.ID, api.StateRunning)
	again, err := h.srv.CreateSandbox(retry(t, h.a), h.a, api.CreateSandboxRequest{Name: "once"})
	if err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	if again.ID != first.ID {
		t.Fatalf("second attempt made %s; want %s", again.ID, first.ID)
	}
	l, err := h.srv.ListSandboxes(t.Context(), h.a, lifecycle.SandboxQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 {
		t.Fatalf("%d sandboxes; want 1", len(l.Items))
	}

	req := api.CreateCommandRequest{Command: "true"}
	c1, err := h.plane.Commands.Exec(attempt(t, h.a), h.a, first.ID, true, req)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := h.plane.Commands.Exec(retry(t, h.a), h.a, first.ID, true, req)
	if err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	if c1.ID != c2.ID {
		t.Fatalf("second attempt started %s; want %s", c2.ID, c1.ID)
	}
	got, _ := h.node.Sandbox(first.ID)
	if len(got.Commands) != 1 {
		t.Fatalf("the node ran %d commands; want 1", len(got.Commands))
	}

	// Another team's attempt with the same key and seed makes its own.
	other, err := h.srv.CreateSandbox(attempt(t, h.b), h.b, api.CreateSandboxRequest{Name: "once"})
	if err != nil {
		t.Fatal(err)
	}
	if other.ID == first.ID {
		t.Fatalf("team b's create answered team a's sandbox %s", first.ID)
	}
}

// TestIdempotentCreateTakesFromPool: a create under an Idempotency-Key
// takes a pooled sandbox as any create does (it keeps the pooled ID), and
// a second attempt of the request answers that sandbox instead of making
// another.
func TestIdempotentCreateTakesFromPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := started(t, func(c *lifecycle.Config) { c.WarmPool = 1; c.DefaultTemplate = "managed" })
		synctest.Wait()
		known, _ := h.node.Known(t.Context())
		first, err := h.srv.CreateSandbox(attempt(t, h.a), h.a, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(known) != 1 || first.ID != known[0] {
			t.Fatalf("a keyed create made %s; want the pooled %v", first.ID, known)
		}
		h.wait(t, h.a, first.ID, api.StateRunning)
		synctest.Wait()
		again, err := h.srv.CreateSandbox(retry(t, h.a), h.a, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("second attempt: %v", err)
		}
		if again.ID != first.ID {
			t.Fatalf("second attempt made %s; want the first's %s", again.ID, first.ID)
		}
		l, err := h.srv.ListSandboxes(t.Context(), h.a, lifecycle.SandboxQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 {
			t.Fatalf("%d sandboxes; want 1", len(l.Items))
		}
	})
}

// lookups counts the store's reads of sandboxes by ID, and by the ID an
// Idempotency-Key derived.
type lookups struct {
	store.Store
	mu      sync.Mutex
	byID    map[string]int
	byIdemp int
}

func (l *lookups) GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	l.mu.Lock()
	l.byID[ref]++
	l.mu.Unlock()
	return l.Store.GetSandbox(ctx, teamID, ref)
}

func (l *lookups) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]api.Sandbox, error) {
	if f.IdempotencyRef != "" {
		l.mu.Lock()
		l.byIdemp++
		l.mu.Unlock()
	}
	return l.Store.ListSandboxes(ctx, f)
}

// TestFirstAttemptLooksForNothing: the first attempt of a create under an
// Idempotency-Key derives an ID never used (its claim's seed is new), so
// it does not read the store for a sandbox made under it; only an attempt
// that took the claim over looks, and finds the first one's.
func TestFirstAttemptLooksForNothing(t *testing.T) {
	l := &lookups{byID: map[string]int{}}
	h := newHarnessOver(t, func(st store.Store) store.Store { l.Store = st; return l }, func(*lifecycle.Config) {})
	derived := id.For(attempt(t, h.a), "sbx")
	first, err := h.srv.CreateSandbox(attempt(t, h.a), h.a, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != derived {
		t.Fatalf("created %s; want the derived %s", first.ID, derived)
	}
	l.mu.Lock()
	before, idemp := l.byID[derived], l.byIdemp
	l.mu.Unlock()
	if before != 0 || idemp != 0 {
		t.Errorf("a first attempt looked for its derived ID %d times, by idempotency_ref %d; want none", before, idemp)
	}
	again, err := h.srv.CreateSandbox(retry(t, h.a), h.a, api.CreateSandboxRequest{})
	if err != nil || again.ID != first.ID {
		t.Fatalf("the attempt that took over: %s, %v; want %s", again.ID, err, first.ID)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byID[derived] == 0 {
		t.Errorf("the attempt that took over did not look for the derived ID")
	}
}
