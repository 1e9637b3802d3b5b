package teams

import (
	"context"

	"github.com/cove-dev/cove/api"
)

// UpdateTeam changes a team's admission, monthly spend limit and budget
// alerts; only the admin team may. A negative spend_limit_usd removes the
// limit.
func (s *Service) UpdateTeam(ctx context.Context, p Principal, teamID string, req api.UpdateTeamRequest) (api.Team, error) {
	if !p.Admin() {
		return api.Team{}, api.Errorf(api.CodePermissionDenied, "only the admin team may change teams")
	}
	t, err := s.st.GetTeam(ctx, teamID)
	if err != nil {
		return api.Team{}, err
	}
	if err := CheckAdmissionChange(t, req.Admission); err != nil {
		return api.Team{}, err
	}
	if req.Admission != nil {
		t.Admission = *req.Admission
	}
	if req.SpendLimitUSD != nil {
		t.SpendLimitUSD = req.SpendLimitUSD
		if *req.SpendLimitUSD < 0 {
			t.SpendLimitUSD = nil
		}
	}
	if req.BudgetAlerts != nil {
		t.BudgetAlerts = *req.BudgetAlerts
		if s.cfg.CheckAlerts != nil {
			if t.BudgetAlerts, err = s.cfg.CheckAlerts(*req.BudgetAlerts); err != nil {
				return api.Team{}, err
			}
		}
	}
	if err := s.st.UpdateTeam(ctx, t); err != nil {
		return api.Team{}, err
	}
	s.log.Info("team changed", "team", t.ID, "spend_limit_usd", t.SpendLimitUSD)
	return t, nil
}
