package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/meter"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMetricsQuery(t *testing.T) {
	s := newTestServer(t)
	var got meter.MetricsQuery
	var gotTeam, gotRef string
	s.fake.MetricsFn = func(ctx context.Context, teamID, ref string, q meter.MetricsQuery) (api.Metrics, error) {
		got, gotTeam, gotRef = q, teamID, ref
		return api.Metrics{StepS: 60, Samples: []api.MetricSample{{CPUMillicores: 900}}, Gaps: []api.MetricsGap{{Reason: "asleep"}}}, nil
	}
	from := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m, err := s.client.Metrics(t.Context(), "box", cove.MetricsQuery{From: from, To: from.Add(time.Hour), Step: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if gotTeam != teamA || gotRef != "box" || !got.From.Equal(from) || !got.To.Equal(from.Add(time.Hour)) || got.Step != time.Minute {
		t.Errorf("control plane got %s %s %+v", gotTeam, gotRef, got)
	}
	if m.StepS != 60 || len(m.Samples) != 1 || m.Samples[0].CPUMillicores != 900 || m.Gaps[0].Reason != "asleep" {
		t.Errorf("answer %+v", m)
	}
	s.do(t, http.MethodGet, "/v1/sandboxes/box/metrics?step=1m", nil, nil)
	if got.Step != time.Minute {
		t.Errorf("step=1m gave %v", got.Step)
	}
	for _, bad := range []string{"from=yesterday", "to=1", "step=0", "step=-5", "step=500ms"} {
		resp, body := s.do(t, http.MethodGet, "/v1/sandboxes/box/metrics?"+bad, nil, nil)
		wantError(t, resp, body, http.StatusBadRequest, api.CodeInvalidArgument)
	}
}

func TestUsageCalls(t *testing.T) {
	s := newTestServer(t)
	var got meter.UsageQuery
	s.fake.UsageFn = func(ctx context.Context, teamID string, q meter.UsageQuery) (api.UsageReport, error) {
		got = q
		return api.UsageReport{GroupBy: q.GroupBy, Items: []api.Usage{{Day: "2026-01-02", CostUSD: 1.5}}, Total: api.Usage{CostUSD: 1.5}}, nil
	}
	r, err := s.client.Usage(t.Context(), cove.UsageQuery{GroupBy: "day"})
	if err != nil {
		t.Fatal(err)
	}
	if got.GroupBy != "day" || r.Total.CostUSD != 1.5 || len(r.Items) != 1 {
		t.Errorf("query %+v, report %+v", got, r)
	}
	s.fake.SandboxUsageFn = func(ctx context.Context, teamID, ref string) (api.SandboxUsage, error) {
		return api.SandboxUsage{Usage: api.Usage{SandboxID: "sbx_1", CPUS: 3}}, nil
	}
	u, err := s.client.SandboxUsage(t.Context(), "sbx_1")
	if err != nil || u.CPUS != 3 {
		t.Errorf("sandbox usage %+v, %v", u, err)
	}
	s.fake.UpdateTeamFn = func(ctx context.Context, p lifecycle.Principal, teamID string, req api.UpdateTeamRequest) (api.Team, error) {
		if p.Team.ID != teamA || teamID != "team_x" || req.SpendLimitUSD == nil || *req.SpendLimitUSD != 10 {
			t.Errorf("update team got %+v %s %+v", p, teamID, req)
		}
		return api.Team{ID: teamID, SpendLimitUSD: req.SpendLimitUSD}, nil
	}
	tm, err := s.client.UpdateTeam(t.Context(), "team_x", api.UpdateTeamRequest{SpendLimitUSD: ptr(10.0)})
	if err != nil || tm.SpendLimitUSD == nil || *tm.SpendLimitUSD != 10 {
		t.Errorf("team %+v, %v", tm, err)
	}
	resp, body := s.do(t, http.MethodPatch, "/v1/teams/team_x", nil, nil)
	wantError(t, resp, body, http.StatusBadRequest, api.CodeInvalidArgument)
}
