package idranges_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/idranges"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

type known []string

func (k known) Known(context.Context) ([]string, error) { return k, nil }

// TestCollect: at Recover, the ranges of sandboxes that are gone (not in
// the store, terminated or failed) and have nothing on the node are freed;
// a live sandbox's, and one with state on the node, are kept. Alloc gives
// a holder the range it holds.
func TestCollect(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateTeam(ctx, api.Team{ID: "team_a", Name: "a", CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	r := idranges.New(st, slog.New(slog.DiscardHandler))
	sandbox := func(id string, state api.SandboxState) {
		if err := st.CreateSandbox(ctx, api.Sandbox{ID: id, TeamID: "team_a", State: state, CreatedAt: time.Now().UTC(), Labels: map[string]string{}}); err != nil {
			t.Fatal(err)
		}
	}
	sandbox("sbx_live", api.StateRunning)
	sandbox("sbx_dead", api.StateTerminated)
	sandbox("sbx_failed_on_node", api.StateFailed)
	held := map[string]uint32{}
	for _, id := range []string{"sbx_live", "sbx_dead", "sbx_failed_on_node", "clone_gone"} {
		g, err := r.Alloc(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		held[id] = g.HostID
	}
	if g, err := r.Alloc(ctx, "sbx_live"); err != nil || g.HostID != held["sbx_live"] {
		t.Fatalf("a second Alloc = %+v, %v; want the range held (%d)", g, err, held["sbx_live"])
	}
	if err := r.Collect(ctx, known{"sbx_failed_on_node"}); err != nil {
		t.Fatal(err)
	}
	left, err := st.ListIDRanges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, g := range left {
		got[g.SandboxID] = true
	}
	want := map[string]bool{"sbx_live": true, "sbx_failed_on_node": true}
	if len(got) != len(want) || !got["sbx_live"] || !got["sbx_failed_on_node"] {
		t.Fatalf("ranges left %v, want %v", got, want)
	}
}
