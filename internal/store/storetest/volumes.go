package storetest

import (
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// testVolumes covers volumes: names unique per team, lookups by ID or
// name within the team only, totals for the team's cap, the measured use,
// and the sandboxes that mount one (kept with each sandbox, live ones
// only), which deleting depends on.
func testVolumes(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	vol := func(id, team, name string, mib int64) api.Volume {
		return api.Volume{ID: id, TeamID: team, Name: name, SizeMiB: mib, Node: "node-1", CreatedAt: at(5), Sandboxes: []string{}}
	}
	a := vol("vol_a", "team_a", "data", 64)
	mustDo(t, s.CreateVolume(ctx, a))
	wantCode(t, s.CreateVolume(ctx, vol("vol_x", "team_a", "data", 16)), api.CodeConflict)
	wantCode(t, s.CreateVolume(ctx, vol("vol_a", "team_b", "other", 16)), api.CodeConflict)
	wantCode(t, s.CreateVolume(ctx, vol("vol_y", "team_x", "other", 16)), api.CodeNotFound)
	b := vol("vol_b", "team_a", "cache", 32)
	mustDo(t, s.CreateVolume(ctx, b))
	other := vol("vol_c", "team_b", "data", 16) // same name, other team
	mustDo(t, s.CreateVolume(ctx, other))

	diff(t, "by id", a, mustGet[api.Volume](t)(s.GetVolume(ctx, "team_a", "vol_a")))
	diff(t, "by name", a, mustGet[api.Volume](t)(s.GetVolume(ctx, "team_a", "data")))
	diff(t, "other's by name", other, mustGet[api.Volume](t)(s.GetVolume(ctx, "team_b", "data")))
	_, err := s.GetVolume(ctx, "team_b", "vol_a")
	wantCode(t, err, api.CodeNotFound)
	_, err = s.GetVolume(ctx, "team_b", "cache")
	wantCode(t, err, api.CodeNotFound)

	diff(t, "list", []string{"vol_a", "vol_b"}, volumeIDs(mustGet[[]api.Volume](t)(s.ListVolumes(ctx, "team_a", "", 0))))
	diff(t, "page", []string{"vol_b"}, volumeIDs(mustGet[[]api.Volume](t)(s.ListVolumes(ctx, "team_a", "vol_a", 1))))
	diff(t, "every team", []string{"vol_a", "vol_b", "vol_c"}, volumeIDs(mustGet[[]api.Volume](t)(s.ListVolumes(ctx, "", "", 0))))

	n, mib, err := s.VolumeTotals(ctx, "team_a")
	mustDo(t, err)
	if n != 2 || mib != 96 {
		t.Errorf("totals = %d volumes, %d MiB; want 2, 96", n, mib)
	}

	mustDo(t, s.SetVolumeUsed(ctx, "vol_a", 12345))
	mustDo(t, s.SetVolumeUsed(ctx, "vol_gone", 1))
	a.UsedBytes = 12345
	diff(t, "used", a, mustGet[api.Volume](t)(s.GetVolume(ctx, "team_a", "vol_a")))

	// Mounts are kept with the sandbox, as created.
	mounts := []api.VolumeMount{
		{Name: "data", VolumeID: "vol_a", Path: "/data"},
		{Name: "cache", VolumeID: "vol_b", Path: "/cache", ReadOnly: true},
	}
	sb := sandbox("team_a", 1, "", api.StateRunning)
	sb.Volumes = mounts
	sb = createSandbox(t, s, sb)
	diff(t, "mounts", mounts, mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", sb.ID)).Volumes)
	listed := mustGet[[]api.Sandbox](t)(s.ListSandboxes(ctx, store.SandboxFilter{TeamID: "team_a"}))
	if len(listed) != 1 {
		t.Fatalf("listed %d sandboxes, want 1", len(listed))
	}
	diff(t, "listed mounts", mounts, listed[0].Volumes)
	sb2 := sandbox("team_a", 2, "", api.StateAsleep)
	sb2.Volumes = mounts[:1]
	sb2 = createSandbox(t, s, sb2)
	createSandbox(t, s, sandbox("team_a", 3, "", api.StateRunning)) // mounts none
	diff(t, "users of a", []string{sb.ID, sb2.ID}, mustGet[[]string](t)(s.VolumeUsers(ctx, "team_a", "vol_a")))
	diff(t, "users of b", []string{sb.ID}, mustGet[[]string](t)(s.VolumeUsers(ctx, "team_a", "vol_b")))
	diff(t, "users of c", []string{}, mustGet[[]string](t)(s.VolumeUsers(ctx, "team_b", "vol_c")))
	diff(t, "users seen by another team", []string{}, mustGet[[]string](t)(s.VolumeUsers(ctx, "team_b", "vol_a")))

	// An update keeps the mounts; a terminated or failed sandbox no
	// longer uses the volume.
	sb.State = api.StateTerminated
	mustDo(t, s.UpdateSandbox(ctx, sb))
	diff(t, "mounts after update", mounts, mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", sb.ID)).Volumes)
	sb2.State = api.StateFailed
	mustDo(t, s.UpdateSandbox(ctx, sb2))
	diff(t, "users after terminate", []string{}, mustGet[[]string](t)(s.VolumeUsers(ctx, "team_a", "vol_a")))

	wantCode(t, s.DeleteVolume(ctx, "team_b", "vol_a"), api.CodeNotFound)
	mustDo(t, s.DeleteVolume(ctx, "team_a", "vol_a"))
	wantCode(t, s.DeleteVolume(ctx, "team_a", "vol_a"), api.CodeNotFound)
	_, err = s.GetVolume(ctx, "team_a", "data")
	wantCode(t, err, api.CodeNotFound)
	n, mib, err = s.VolumeTotals(ctx, "team_a")
	mustDo(t, err)
	if n != 1 || mib != 32 {
		t.Errorf("totals after delete = %d volumes, %d MiB; want 1, 32", n, mib)
	}
}

func volumeIDs(vs []api.Volume) []string {
	ids := []string{}
	for _, v := range vs {
		ids = append(ids, v.ID)
	}
	return ids
}
