package httpapi

import (
	"context"
	"github.com/cove-dev/cove/internal/control/workloads"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// The fake's workloads: each call is recorded and answers not found.

func (f *fakeControlPlane) SubmitWorkload(ctx context.Context, teamID string, req api.CreateWorkloadRequest) (api.Workload, error) {
	f.record("SubmitWorkload", teamID)
	return api.Workload{}, notFound("template", req.Template)
}

func (f *fakeControlPlane) GetWorkload(ctx context.Context, teamID, id string) (api.Workload, error) {
	f.record("GetWorkload", teamID)
	return api.Workload{}, notFound("workload", id)
}

func (f *fakeControlPlane) WaitWorkload(ctx context.Context, teamID, id string, want api.WorkloadState, timeout time.Duration) (api.Workload, error) {
	f.record("WaitWorkload", teamID)
	return api.Workload{}, notFound("workload", id)
}

func (f *fakeControlPlane) ListWorkloads(ctx context.Context, teamID string, q workloads.Query) (api.List[api.Workload], error) {
	f.record("ListWorkloads", teamID)
	return api.List[api.Workload]{Items: []api.Workload{}}, nil
}

func (f *fakeControlPlane) CancelWorkload(ctx context.Context, teamID, id string) (api.Workload, error) {
	f.record("CancelWorkload", teamID)
	return api.Workload{}, notFound("workload", id)
}

func (f *fakeControlPlane) WorkloadOutput(ctx context.Context, teamID, id string) (api.Workload, node.Output, error) {
	f.record("WorkloadOutput", teamID)
	return api.Workload{}, nil, notFound("workload", id)
}
