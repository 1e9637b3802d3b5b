package httpapi

import (
	"context"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/meter"
)

// fakeMetering is the fake meter (Metering), embedded in the fake
// control plane, which also answers UpdateTeam through it.
type fakeMetering struct {
	MetricsFn      func(ctx context.Context, teamID, ref string, q meter.MetricsQuery) (api.Metrics, error)
	SandboxUsageFn func(ctx context.Context, teamID, ref string) (api.SandboxUsage, error)
	UsageFn        func(ctx context.Context, teamID string, q meter.UsageQuery) (api.UsageReport, error)
	UpdateTeamFn   func(ctx context.Context, p lifecycle.Principal, teamID string, req api.UpdateTeamRequest) (api.Team, error)
}

func (f *fakeMetering) Metrics(ctx context.Context, teamID, ref string, q meter.MetricsQuery) (api.Metrics, error) {
	if f.MetricsFn != nil {
		return f.MetricsFn(ctx, teamID, ref, q)
	}
	return api.Metrics{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", ref)
}

func (f *fakeMetering) SandboxUsage(ctx context.Context, teamID, ref string) (api.SandboxUsage, error) {
	if f.SandboxUsageFn != nil {
		return f.SandboxUsageFn(ctx, teamID, ref)
	}
	return api.SandboxUsage{}, api.Errorf(api.CodeNotFound, "sandbox %s not found", ref)
}

func (f *fakeMetering) Usage(ctx context.Context, teamID string, q meter.UsageQuery) (api.UsageReport, error) {
	if f.UsageFn != nil {
		return f.UsageFn(ctx, teamID, q)
	}
	return api.UsageReport{Items: []api.Usage{}}, nil
}

func (f *fakeMetering) UpdateTeam(ctx context.Context, p lifecycle.Principal, teamID string, req api.UpdateTeamRequest) (api.Team, error) {
	if f.UpdateTeamFn != nil {
		return f.UpdateTeamFn(ctx, p, teamID, req)
	}
	return api.Team{}, api.Errorf(api.CodeNotFound, "team %s not found", teamID)
}

var _ Metering = (*fakeMetering)(nil)
