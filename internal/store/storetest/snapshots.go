package storetest

import (
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// testSnapshots covers snapshots: names unique per team, lookups by ID or
// name within the team only, and what stands on a snapshot (live
// sandboxes and snapshots of them), which deleting depends on.
func testSnapshots(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	parent := createSandbox(t, s, sandbox("team_a", 1, "", api.StateRunning))
	snap := func(id, name string, size int64, layers ...store.Layer) store.Snapshot {
		return store.Snapshot{
			Snapshot: api.Snapshot{ID: id, TeamID: "team_a", Name: name, SandboxID: parent.ID, SizeBytes: size, DataBytes: 2 * size, Digest: "sha256:aa", CreatedAt: at(3)},
			Layers:   append([]store.Layer{{Snapshot: id, HostID: 1 << 30, Size: 65536}}, layers...),
		}
	}
	a := snap("snap_a", "first", 10)
	a.Template = "tools"
	mustDo(t, s.CreateSnapshot(ctx, a))
	wantCode(t, s.CreateSnapshot(ctx, snap("snap_x", "first", 1)), api.CodeConflict)
	bad := snap("snap_y", "other", 1)
	bad.TeamID = "team_x"
	wantCode(t, s.CreateSnapshot(ctx, bad), api.CodeNotFound)

	diff(t, "by id", a, mustGet[store.Snapshot](t)(s.GetSnapshot(ctx, "team_a", "snap_a")))
	diff(t, "by name", a, mustGet[store.Snapshot](t)(s.GetSnapshot(ctx, "team_a", "first")))
	_, err := s.GetSnapshot(ctx, "team_b", "snap_a")
	wantCode(t, err, api.CodeNotFound)

	// A sandbox on a, and a snapshot of it standing on a too.
	child := createSandbox(t, s, sandbox("team_a", 2, "", api.StateRunning))
	chain := []store.Layer{{Snapshot: "snap_a", HostID: 1 << 30, Size: 65536}}
	mustDo(t, s.SetSandboxLayers(ctx, child.ID, chain))
	diff(t, "layers", chain, mustGet[[]store.Layer](t)(s.SandboxLayers(ctx, child.ID)))
	diff(t, "no layers", []store.Layer{}, mustGet[[]store.Layer](t)(s.SandboxLayers(ctx, parent.ID)))
	b := snap("snap_b", "second", 5, chain...)
	b.SandboxID = child.ID
	b.Template = "team_b/tools"
	mustDo(t, s.CreateSnapshot(ctx, b))
	diff(t, "users", []string{child.ID, "snap_b"}, mustGet[[]string](t)(s.SnapshotUsers(ctx, "snap_a")))
	diff(t, "users of b", []string{}, mustGet[[]string](t)(s.SnapshotUsers(ctx, "snap_b")))

	diff(t, "list", []string{"snap_a", "snap_b"}, snapshotIDs(mustGet[[]store.Snapshot](t)(s.ListSnapshots(ctx, "team_a", "", "", 0))))
	diff(t, "list of child", []string{"snap_b"}, snapshotIDs(mustGet[[]store.Snapshot](t)(s.ListSnapshots(ctx, "team_a", child.ID, "", 0))))
	diff(t, "page", []string{"snap_b"}, snapshotIDs(mustGet[[]store.Snapshot](t)(s.ListSnapshots(ctx, "team_a", "", "snap_a", 1))))
	diff(t, "every team", []string{"snap_a", "snap_b"}, snapshotIDs(mustGet[[]store.Snapshot](t)(s.ListSnapshots(ctx, "", "", "", 0))))
	diff(t, "other team", []string{}, snapshotIDs(mustGet[[]store.Snapshot](t)(s.ListSnapshots(ctx, "team_b", "", "", 0))))
	diff(t, "bytes", int64(15), mustGet[int64](t)(s.SnapshotBytes(ctx, "team_a")))
	// The images they need: a's is team_a's "tools", b's team_b's "tools"
	// as team_a names it.
	diff(t, "of a's tools", []string{"snap_a"}, snapshotIDs(mustGet[[]store.Snapshot](t)(s.TemplateSnapshots(ctx, "team_a", "tools", "team_a/tools"))))
	diff(t, "of b's tools", []string{"snap_b"}, snapshotIDs(mustGet[[]store.Snapshot](t)(s.TemplateSnapshots(ctx, "team_b", "tools", "team_b/tools"))))
	diff(t, "of other", []string{}, snapshotIDs(mustGet[[]store.Snapshot](t)(s.TemplateSnapshots(ctx, "team_b", "other", "team_b/other"))))

	// Another team cannot delete it; b's deletion frees a of b.
	wantCode(t, s.DeleteSnapshot(ctx, "team_b", "snap_b"), api.CodeNotFound)
	mustDo(t, s.DeleteSnapshot(ctx, "team_a", "snap_b"))
	diff(t, "users after b", []string{child.ID}, mustGet[[]string](t)(s.SnapshotUsers(ctx, "snap_a")))
	// A terminated sandbox no longer stands on it; a restore moves it.
	child.State = api.StateTerminated
	mustDo(t, s.UpdateSandbox(ctx, child))
	diff(t, "users after terminate", []string{}, mustGet[[]string](t)(s.SnapshotUsers(ctx, "snap_a")))
	mustDo(t, s.SetSandboxLayers(ctx, parent.ID, chain))
	diff(t, "users after restore", []string{parent.ID}, mustGet[[]string](t)(s.SnapshotUsers(ctx, "snap_a")))
	mustDo(t, s.SetSandboxLayers(ctx, parent.ID, nil))
	diff(t, "users after clear", []string{}, mustGet[[]string](t)(s.SnapshotUsers(ctx, "snap_a")))
	mustDo(t, s.DeleteSnapshot(ctx, "team_a", "snap_a"))
	wantCode(t, s.DeleteSnapshot(ctx, "team_a", "snap_a"), api.CodeNotFound)
	diff(t, "bytes after", int64(0), mustGet[int64](t)(s.SnapshotBytes(ctx, "team_a")))
}

func snapshotIDs(ss []store.Snapshot) []string {
	ids := []string{}
	for _, s := range ss {
		ids = append(ids, s.ID)
	}
	return ids
}
