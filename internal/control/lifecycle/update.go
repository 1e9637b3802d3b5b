package lifecycle

import (
	"context"
	"fmt"
	"github.com/cove-dev/cove/internal/control/meter"
	"time"

	"github.com/cove-dev/cove/api"
)

// UpdateSandbox changes the limits, network policy and labels of a
// sandbox. A new network policy applies to new connections at once.
func (s *Core) UpdateSandbox(ctx context.Context, teamID, ref string, req api.UpdateSandboxRequest) (api.Sandbox, error) {
	sb, o, err := s.lockSandbox(ctx, teamID, ref)
	if err != nil {
		return sb, err
	}
	defer o.mu.Unlock()
	if sb.State.Terminal() || sb.State == api.StateTerminating {
		return sb, api.Errorf(api.CodeConflict, "sandbox %s is %s; it can no longer change", sb.ID, sb.State)
	}
	if req.IdleTimeoutS != nil {
		if *req.IdleTimeoutS < 0 {
			return sb, invalid("idle_timeout_s is negative")
		}
		sb.IdleTimeoutS = *req.IdleTimeoutS
	}
	if req.OnIdle != nil {
		if *req.OnIdle != "sleep" && *req.OnIdle != "terminate" {
			return sb, invalid("on_idle is %q; use sleep or terminate", *req.OnIdle)
		}
		sb.OnIdle = *req.OnIdle
	}
	if req.MaxLifetimeS != nil {
		if *req.MaxLifetimeS < 0 {
			return sb, invalid("max_lifetime_s is negative")
		}
		sb.MaxLifetimeS = *req.MaxLifetimeS
		sb.ExpiresAt = nil
		if sb.MaxLifetimeS > 0 {
			t := sb.CreatedAt.Add(time.Duration(sb.MaxLifetimeS) * time.Second)
			sb.ExpiresAt = &t
		}
	}
	if req.SpendLimitUSD != nil {
		if *req.SpendLimitUSD < 0 {
			return sb, invalid("spend_limit_usd is negative")
		}
		sb.SpendLimitUSD = req.SpendLimitUSD
	}
	if req.OnBudget != nil {
		if sb.OnBudget, err = meter.ValidateOnBudget(*req.OnBudget); err != nil {
			return sb, err
		}
	}
	if req.BudgetAlerts != nil {
		if sb.BudgetAlerts, err = meter.ValidateBudgetAlerts(*req.BudgetAlerts); err != nil {
			return sb, err
		}
	}
	if req.Labels != nil {
		if err := validateLabels(req.Labels); err != nil {
			return sb, err
		}
		sb.Labels = req.Labels
	}
	if req.Network != nil {
		allow, err := checkPolicy("network.allow", req.Network.Allow)
		if err != nil {
			return sb, err
		}
		sb.Network.Allow = allow
		if req.Network.SetupAllow != nil {
			if sb.Network.SetupAllow, err = checkPolicy("network.setup_allow", req.Network.SetupAllow); err != nil {
				return sb, err
			}
		}
	}
	if err := s.store.UpdateSandbox(ctx, sb); err != nil {
		return sb, err
	}
	if req.Network != nil && sb.State == api.StateRunning {
		if err := s.node.SetPolicy(sb.ID, sb.Network); err != nil {
			return sb, fmt.Errorf("apply network policy to %s: %w", sb.ID, err)
		}
	}
	s.notify()
	return sb, nil
}
