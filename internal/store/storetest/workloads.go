package storetest

import (
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

func testWorkloads(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	code := 3
	started, ended := at(5), at(9)
	w1 := api.Workload{ID: "wl_0001", TeamID: "team_a", Template: "managed", Command: "python3 run.py",
		Source: &api.Source{Type: api.SourceAsset, AssetID: "ast_1"}, Env: map[string]string{"A": "1"},
		Secrets: map[string]string{"TOKEN": "tok"}, Workdir: "/workspace", User: "user",
		Resources: api.WorkloadResources{CPUs: 1, MemoryMiB: 512, DiskMiB: 1024, GPUs: 1, GPUType: "nvidia.com/gpu"},
		TimeoutS:  60, MaxQueueS: 30, Labels: map[string]string{"k": "v"},
		State: api.WorkloadQueued, StateReason: "no node has a free GPU", CreatedAt: at(1)}
	w2 := api.Workload{ID: "wl_0002", TeamID: "team_a", Template: "managed", Argv: []string{"true"},
		Workdir: "/workspace", User: "root", State: api.WorkloadQueued, CreatedAt: at(2)}
	w3 := api.Workload{ID: "wl_0003", TeamID: "team_b", Template: "managed", Command: "true",
		Workdir: "/workspace", User: "user", State: api.WorkloadRunning, CreatedAt: at(3)}
	for _, w := range []*api.Workload{&w1, &w2, &w3} {
		mustDo(t, s.CreateWorkload(ctx, *w))
		w.Version = 1
	}
	wantCode(t, s.CreateWorkload(ctx, w1), api.CodeConflict)
	orphan := w1
	orphan.ID, orphan.TeamID = "wl_0009", "team_none"
	wantCode(t, s.CreateWorkload(ctx, orphan), api.CodeNotFound)

	utc := func(w api.Workload) api.Workload {
		w.CreatedAt = w.CreatedAt.UTC()
		for _, p := range []**time.Time{&w.StartedAt, &w.EndedAt} {
			if *p != nil {
				u := (*p).UTC()
				*p = &u
			}
		}
		return w
	}
	diff(t, "GetWorkload", utc(w1), mustGet[api.Workload](t)(s.GetWorkload(ctx, "team_a", "wl_0001")))
	diff(t, "GetWorkload any team", utc(w3), mustGet[api.Workload](t)(s.GetWorkload(ctx, "", "wl_0003")))
	_, err := s.GetWorkload(ctx, "team_b", "wl_0001")
	wantCode(t, err, api.CodeNotFound)

	w1.State, w1.StateReason, w1.Devices = api.WorkloadExited, "", []string{"nvidia.com/gpu=0"}
	w1.ExitCode, w1.StartedAt, w1.EndedAt, w1.CostUSD, w1.StdoutBytes = &code, &started, &ended, 0.25, 12
	mustDo(t, s.UpdateWorkload(ctx, w1))
	w1.Version++
	diff(t, "GetWorkload after update", utc(w1), mustGet[api.Workload](t)(s.GetWorkload(ctx, "team_a", "wl_0001")))
	other := w3
	other.TeamID = "team_a"
	wantCode(t, s.UpdateWorkload(ctx, other), api.CodeNotFound)

	diff(t, "ListWorkloads team_a", []api.Workload{utc(w1), utc(w2)},
		mustGet[[]api.Workload](t)(s.ListWorkloads(ctx, store.WorkloadFilter{TeamID: "team_a"})))
	diff(t, "ListWorkloads queued", []api.Workload{utc(w2)},
		mustGet[[]api.Workload](t)(s.ListWorkloads(ctx, store.WorkloadFilter{States: []api.WorkloadState{api.WorkloadQueued}})))
	diff(t, "ListWorkloads paged", []api.Workload{utc(w2)},
		mustGet[[]api.Workload](t)(s.ListWorkloads(ctx, store.WorkloadFilter{After: "wl_0001", Limit: 1})))
}
