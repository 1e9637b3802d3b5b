package teams_test

import (
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/teams"
)

// TestUpdateTeam: only the admin team changes teams; a negative spend
// limit removes the limit; budget alerts pass through the meter's check
// (CheckAlerts), whose refusal changes nothing.
func TestUpdateTeam(t *testing.T) {
	svc, st, _ := newService(t)
	ctx := t.Context()
	admin := teams.Principal{Team: team(t, st, teams.AdminTeam, api.Admission{})}
	other := teams.Principal{Team: team(t, st, "other", api.Admission{ManagedEnvironment: true})}
	limit, none := 12.5, -1.0
	if _, err := svc.UpdateTeam(ctx, other, other.Team.ID, api.UpdateTeamRequest{SpendLimitUSD: &limit}); api.ErrorCode(err) != api.CodePermissionDenied {
		t.Fatalf("a non-admin team's update: %v, want permission_denied", err)
	}
	got, err := svc.UpdateTeam(ctx, admin, other.Team.ID, api.UpdateTeamRequest{SpendLimitUSD: &limit, Admission: &api.Admission{Preview: true}})
	if err != nil || got.SpendLimitUSD == nil || *got.SpendLimitUSD != limit || !got.Admission.Preview {
		t.Fatalf("update = %+v, %v", got, err)
	}
	if stored, _ := st.GetTeam(ctx, other.Team.ID); stored.SpendLimitUSD == nil || *stored.SpendLimitUSD != limit {
		t.Fatalf("stored %+v", stored)
	}
	if got, err = svc.UpdateTeam(ctx, admin, other.Team.ID, api.UpdateTeamRequest{SpendLimitUSD: &none}); err != nil || got.SpendLimitUSD != nil {
		t.Fatalf("a negative limit: %+v, %v; want no limit", got, err)
	}

	refusal := api.Errorf(api.CodeInvalidArgument, "budget_alerts refused")
	checked := teams.New(teams.Config{CheckAlerts: func(in []float64) ([]float64, error) {
		if slices.Contains(in, 100) {
			return nil, refusal
		}
		out := slices.Clone(in)
		slices.Sort(out)
		return out, nil
	}}, st, slog.New(slog.DiscardHandler), nil)
	got, err = checked.UpdateTeam(ctx, admin, other.Team.ID, api.UpdateTeamRequest{BudgetAlerts: &[]float64{90, 50}})
	if err != nil || !slices.Equal(got.BudgetAlerts, []float64{50, 90}) {
		t.Fatalf("alerts = %v, %v; want the checked [50 90]", got.BudgetAlerts, err)
	}
	if _, err = checked.UpdateTeam(ctx, admin, other.Team.ID, api.UpdateTeamRequest{BudgetAlerts: &[]float64{100}, SpendLimitUSD: &limit}); !errors.Is(err, refusal) {
		t.Fatalf("refused alerts: %v", err)
	}
	if stored, _ := st.GetTeam(ctx, other.Team.ID); !slices.Equal(stored.BudgetAlerts, []float64{50, 90}) || stored.SpendLimitUSD != nil {
		t.Fatalf("a refused update changed the team: %+v", stored)
	}
}
