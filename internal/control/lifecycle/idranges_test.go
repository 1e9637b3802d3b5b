package lifecycle_test

import (
	"errors"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// TestIDRanges: every sandbox starts in a host ID range of its own, keeps
// it through sleep and wake, and frees it once it is gone; a sandbox from
// before ranges (none stored) wakes in the legacy range.
func TestIDRanges(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	idsOf := func(id string) node.IDRange {
		t.Helper()
		got, ok := h.node.Sandbox(id)
		if !ok {
			t.Fatalf("node has no %s", id)
		}
		return got.Spec.IDs
	}
	a, b := h.running(t, h.a, "a"), h.running(t, h.b, "b")
	ra, rb := idsOf(a.ID), idsOf(b.ID)
	if ra == rb || ra.Size != node.IDRangeSize || rb.Size != node.IDRangeSize ||
		ra.HostID < node.IDRangeFirst || rb.HostID < node.IDRangeFirst {
		t.Fatalf("ranges %+v and %+v", ra, rb)
	}

	// Asleep, a keeps its range and wakes in it.
	if _, err := h.srv.SleepSandbox(ctx, h.a, a.ID, "test"); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, a.ID, api.StateAsleep)
	if r, err := h.st.GetIDRange(ctx, a.ID); err != nil || r.HostID != ra.HostID {
		t.Fatalf("asleep a holds %+v, %v", r, err)
	}
	if _, err := h.srv.WakeSandbox(ctx, h.a, a.ID); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, a.ID, api.StateRunning)
	if got := idsOf(a.ID); got != ra {
		t.Errorf("a woke in %+v, slept in %+v", got, ra)
	}

	// Terminated, b's range is free, and the next sandbox gets it.
	if _, err := h.srv.TerminateSandbox(ctx, h.b, b.ID); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.b, b.ID, api.StateTerminated)
	_, err := h.st.GetIDRange(ctx, b.ID)
	wantCode(t, err, api.CodeNotFound)
	c := h.running(t, h.b, "c")
	if got := idsOf(c.ID); got != rb {
		t.Errorf("c got %+v, want b's freed %+v", got, rb)
	}

	// A failed start frees its range.
	h.node.Fail("start", errors.New("no luck"))
	d, err := h.srv.CreateSandbox(ctx, h.a, api.CreateSandboxRequest{Name: "d"})
	if err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, d.ID, api.StateFailed)
	h.node.Fail("start", nil)
	_, err = h.st.GetIDRange(ctx, d.ID)
	wantCode(t, err, api.CodeNotFound)

	// A sandbox created before ranges holds none: it wakes in the legacy
	// range, where its saved files' owners are.
	e := h.running(t, h.a, "e")
	if _, err := h.srv.SleepSandbox(ctx, h.a, e.ID, "test"); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, e.ID, api.StateAsleep)
	if err := h.st.ReleaseIDRange(ctx, e.ID); err != nil { // as if from before
		t.Fatal(err)
	}
	if _, err := h.srv.WakeSandbox(ctx, h.a, e.ID); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, e.ID, api.StateRunning)
	if got := idsOf(e.ID); got != node.LegacyIDRange {
		t.Errorf("legacy sandbox woke in %+v", got)
	}

	// Recover frees ranges whose sandbox is gone without a word (a crash
	// between a create's allocation and its row, or after a terminate).
	// So are the ranges of clones a crash cut short.
	for _, ghost := range []string{"sbx_ghost", "clone_ghost"} {
		if _, err := h.st.AllocIDRange(ctx, ghost, node.IDRangeFirst, node.IDRangeSize, node.IDRangeCount); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.srv.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ghost := range []string{"sbx_ghost", "clone_ghost"} {
		_, err = h.st.GetIDRange(ctx, ghost)
		wantCode(t, err, api.CodeNotFound)
	}
	if r, err := h.st.GetIDRange(ctx, a.ID); err != nil || r.HostID != ra.HostID {
		t.Errorf("Recover took running a's range: %+v, %v", r, err)
	}
}
