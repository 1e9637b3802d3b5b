package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

func report(sandboxID, dest string, decision string, count int64, at time.Time, cmd string) node.Observation {
	return node.Observation{SandboxID: sandboxID, NetworkObservation: api.NetworkObservation{
		Destination: dest, Port: 443, Decision: decision, Count: count, BytesOut: count, BytesIn: 2 * count,
		FirstSeen: at, LastSeen: at, LastCommandID: cmd,
	}}
}

func (h *harness) command(t *testing.T, team, sandboxID string) string {
	t.Helper()
	res, err := h.plane.Commands.Exec(t.Context(), team, sandboxID, true, api.CreateCommandRequest{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.plane.Commands.WaitCommand(t.Context(), team, sandboxID, res.ID); err != nil {
		t.Fatal(err)
	}
	return res.ID
}

func (h *harness) network(t *testing.T, team, sandboxID string) []api.NetworkObservation {
	t.Helper()
	v, err := h.plane.Observations.Network(t.Context(), team, sandboxID)
	if err != nil {
		t.Fatal(err)
	}
	return v.Observations
}

// TestObservationsStored: the node's reports reach the store at a flush;
// the API shows the same sums before and after it (nothing counted twice
// or missed); a command the agent names is shown only if it is the
// sandbox's own.
func TestObservationsStored(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	a := h.running(t, h.a, "a")
	b := h.running(t, h.b, "b")
	cmdA, cmdB := h.command(t, h.a, a.ID), h.command(t, h.b, b.ID)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	h.node.Observe(
		report(a.ID, "x.test", "allowed", 2, t0, cmdA),
		report(a.ID, "y.test", "denied", 1, t0, cmdB), // another sandbox's command: forged
		report(a.ID, "z.test", "denied", 1, t0, "cmd_nonesuch"),
		report("sbx_warm", "x.test", "allowed", 1, t0, ""), // a sandbox the store does not hold
	)
	want := []api.NetworkObservation{
		report("", "x.test", "allowed", 2, t0, cmdA).NetworkObservation,
		report("", "y.test", "denied", 1, t0, "").NetworkObservation,
		report("", "z.test", "denied", 1, t0, "").NetworkObservation,
	}
	if d := cmp.Diff(want, h.network(t, h.a, a.ID)); d != "" {
		t.Errorf("before the flush (-want +got):\n%s", d)
	}
	h.plane.Observations.Flush(ctx)
	if d := cmp.Diff(want, h.network(t, h.a, a.ID)); d != "" {
		t.Errorf("after the flush (-want +got):\n%s", d)
	}
	stored, err := h.st.ListObservations(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, stored); d != "" {
		t.Errorf("stored (-want +got):\n%s", d)
	}

	// More reports add to the stored rows; the view sums both.
	t1 := t0.Add(time.Minute)
	h.node.Observe(report(a.ID, "x.test", "allowed", 3, t1, ""))
	want[0].Count, want[0].BytesOut, want[0].BytesIn, want[0].LastSeen = 5, 5, 10, t1
	if d := cmp.Diff(want, h.network(t, h.a, a.ID)); d != "" {
		t.Errorf("stored plus pending (-want +got):\n%s", d)
	}
	h.plane.Observations.Flush(ctx)
	if d := cmp.Diff(want, h.network(t, h.a, a.ID)); d != "" {
		t.Errorf("after the second flush (-want +got):\n%s", d)
	}
	if got := h.network(t, h.b, b.ID); len(got) != 0 {
		t.Errorf("sandbox b sees %+v", got)
	}
	if _, err := h.plane.Observations.Network(ctx, h.b, a.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("team b reads team a's observations: %v", err)
	}

	// They outlast the sandbox.
	if _, err := h.srv.TerminateSandbox(ctx, h.a, a.ID); err != nil {
		t.Fatal(err)
	}
	h.wait(t, h.a, a.ID, api.StateTerminated)
	if d := cmp.Diff(want, h.network(t, h.a, a.ID)); d != "" {
		t.Errorf("after termination (-want +got):\n%s", d)
	}
}

// failingStore refuses observations while fail is set.
type failingStore struct {
	store.Store
	fail bool
}

func (f *failingStore) AddObservations(ctx context.Context, r []store.Observation, n int) error {
	if f.fail {
		return api.Errorf(api.CodeUnavailable, "store down")
	}
	return f.Store.AddObservations(ctx, r, n)
}

// TestNetworkDeniedForgedCommand: a denial's event names the command only
// when it is the sandbox's.
func TestNetworkDeniedForgedCommand(t *testing.T) {
	h := newHarness(t)
	a := h.running(t, h.a, "a")
	b := h.running(t, h.b, "b")
	cmdA, cmdB := h.command(t, h.a, a.ID), h.command(t, h.b, b.ID)
	h.srv.NetworkDenied(a.ID, api.NetworkObservation{Destination: "x.test", Port: 443, Count: 1, LastCommandID: cmdB}, 0)
	h.srv.NetworkDenied(a.ID, api.NetworkObservation{Destination: "y.test", Port: 443, Count: 1, LastCommandID: cmdA}, 0)
	evs, err := h.st.ListEvents(t.Context(), store.EventFilter{TeamID: h.a, SandboxID: a.ID, Types: []string{"network.denied"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].CommandID != "" || evs[1].CommandID != cmdA {
		t.Fatalf("events %+v", evs)
	}
	if evs, _ := h.st.ListEvents(t.Context(), store.EventFilter{TeamID: h.b, Types: []string{"network.denied"}}); len(evs) != 0 {
		t.Fatalf("team b got %+v", evs)
	}
}

// TestObservationsExpire: observations last seen before the event
// retention go.
func TestObservationsExpire(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	a := h.running(t, h.a, "a")
	now := time.Now().UTC()
	h.node.Observe(
		report(a.ID, "old.test", "allowed", 1, now.Add(-31*24*time.Hour), ""),
		report(a.ID, "new.test", "allowed", 1, now.Add(-29*24*time.Hour), ""),
	)
	h.plane.Observations.Flush(ctx)
	h.plane.Observations.Expire(ctx)
	got := h.network(t, h.a, a.ID)
	if len(got) != 1 || got[0].Destination != "new.test" {
		t.Fatalf("after expiry: %+v", got)
	}
}

// TestObservationsKeptWhileStoreFails: reports the store refuses are kept,
// shown, and stored at a later flush.
func TestObservationsKeptWhileStoreFails(t *testing.T) {
	ctx := t.Context()
	var fs *failingStore
	h := newHarnessOver(t, func(st store.Store) store.Store {
		fs = &failingStore{Store: st}
		return fs
	}, func(*lifecycle.Config) {})
	plane, nd, st, admin := h.plane, h.node, h.st, h.admin
	sb, err := h.srv.CreateSandbox(ctx, admin.Team.ID, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	count := func() int64 {
		t.Helper()
		v, err := plane.Observations.Network(ctx, admin.Team.ID, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Observations) != 1 {
			t.Fatalf("observations %+v", v.Observations)
		}
		return v.Observations[0].Count
	}
	t0 := time.Now().UTC()
	nd.Observe(report(sb.ID, "x.test", "allowed", 1, t0, ""))
	fs.fail = true
	plane.Observations.Flush(ctx)
	nd.Observe(report(sb.ID, "x.test", "allowed", 1, t0, ""))
	if n := count(); n != 2 {
		t.Errorf("count %d while the store fails, want 2", n)
	}
	fs.fail = false
	plane.Observations.Flush(ctx)
	if n := count(); n != 2 {
		t.Errorf("count %d after the store came back, want 2", n)
	}
	if rows, _ := st.ListObservations(ctx, sb.ID); len(rows) != 1 || rows[0].Count != 2 {
		t.Errorf("stored %+v", rows)
	}
}
