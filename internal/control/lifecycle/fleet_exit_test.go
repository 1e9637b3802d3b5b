package lifecycle_test

import (
	"slices"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// TestExitHeardTwice: in a fleet every control replica hears each node's
// exits, so one exit reaches the core more than once; it is recorded
// once: the command keeps its first end, and there is one
// command.exited event.
func TestExitHeardTwice(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	sb := h.running(t, h.a, "twice")
	c, err := h.plane.Commands.Exec(ctx, h.a, sb.ID, true, api.CreateCommandRequest{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	h.eventsUntil(t, h.a, sb.ID, "command.exited")
	first, err := h.st.GetCommand(ctx, sb.ID, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Another replica's client delivers the same report, and a late,
	// different one.
	h.srv.OnExit(sb.ID, c.ID, node.Exit{ExitCode: 0}, false)
	h.srv.OnExit(sb.ID, c.ID, node.Exit{ExitCode: 9}, false)
	got, err := h.st.GetCommand(ctx, sb.ID, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != first.State || *got.ExitCode != *first.ExitCode || !got.EndedAt.Equal(*first.EndedAt) {
		t.Fatalf("command after the exit was heard again = %s %d %v; want %s %d %v",
			got.State, *got.ExitCode, got.EndedAt, first.State, *first.ExitCode, first.EndedAt)
	}
	exited := 0
	for _, e := range h.events(t, h.a, sb.ID) {
		if e == "command.exited" {
			exited++
		}
	}
	if exited != 1 || !slices.Contains(h.events(t, h.a, sb.ID), "command.exited") {
		t.Fatalf("%d command.exited events; want 1", exited)
	}
}
