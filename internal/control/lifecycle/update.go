package lifecycle

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/store"
)

// UpdateSandbox changes the limits, network policy and labels of a
// sandbox. A new network policy applies to new connections at once when
// the sandbox runs. A sandbox that does not run (asleep, sleeping, waking,
// starting) takes the change in the store alone, without waiting for the
// transition under way (a sleep's save may take minutes): that transition
// is applied over the change, and the sandbox wakes or starts under it. A
// change that another writer (a replica) keeps racing answers conflict once
// store.UpdateAttempts rounds are lost.
func (s *Core) UpdateSandbox(ctx context.Context, teamID, ref string, req api.UpdateSandboxRequest) (api.Sandbox, error) {
	sb, err := s.GetSandbox(ctx, teamID, ref)
	if err != nil {
		return sb, err
	}
	if req.Network != nil && req.Network.Inject != nil {
		rules, err := checkInject("network.inject", req.Network.Inject)
		if err != nil {
			return sb, err
		}
		if err := s.checkSecretsExist(ctx, teamID, rules, nil); err != nil {
			return sb, err
		}
	}
	for attempt := 1; ; attempt++ {
		if sb.State == api.StateRunning {
			return s.updateRunning(ctx, teamID, sb.ID, req)
		}
		next := sb
		if err := applyUpdate(&next, req); err != nil {
			return sb, err
		}
		err := s.store.UpdateSandbox(ctx, next)
		if err == nil {
			next.Version++
			s.notify()
			return next, nil
		}
		if !store.Stale(err) || attempt == store.UpdateAttempts {
			return sb, err
		}
		// Changed since it was read: decide again on the row as it is.
		if sb, err = s.GetSandbox(ctx, teamID, sb.ID); err != nil {
			return sb, err
		}
	}
}

// updateRunning is UpdateSandbox of a running sandbox, under its
// life-cycle lock so that its node is given the new policy before any
// transition of this process changes what runs.
func (s *Core) updateRunning(ctx context.Context, teamID, id string, req api.UpdateSandboxRequest) (api.Sandbox, error) {
	sb, o, err := s.lockSandbox(ctx, teamID, id)
	if err != nil {
		return sb, err
	}
	defer o.mu.Unlock()
	for attempt := 1; ; attempt++ {
		next := sb
		if err := applyUpdate(&next, req); err != nil {
			return sb, err
		}
		err := s.store.UpdateSandbox(ctx, next)
		if err == nil {
			next.Version++
			sb = next
			break
		}
		if !store.Stale(err) || attempt == store.UpdateAttempts {
			return sb, err
		}
		// Changed since it was read: decide again on the row as it is.
		if sb, err = s.store.GetSandbox(ctx, teamID, sb.ID); err != nil {
			return sb, err
		}
	}
	if req.Network != nil && sb.State == api.StateRunning {
		// The secrets first: a rule is never without its secrets.
		err := s.applyInjection(ctx, sb)
		if err == nil {
			err = s.node.SetPolicy(sb.ID, sb.Network)
		}
		if err != nil {
			// Another replica may have put it to sleep since: the stored
			// policy is then the one it wakes with, and nothing is lost.
			cur, gerr := s.store.GetSandbox(ctx, teamID, sb.ID)
			if gerr != nil || cur.State == api.StateRunning {
				return sb, fmt.Errorf("apply network policy to %s: %w", sb.ID, err)
			}
			sb = cur
		}
	}
	s.notify()
	return sb, nil
}

// reapplyPolicy gives the node the sandbox's policy as stored when it is
// not the one the node was given (applied) as the sandbox started or
// woke: a PATCH stored meanwhile, which only the store took.
func (s *Core) reapplyPolicy(sb api.Sandbox, applied api.NetworkPolicy) {
	if slices.Equal(sb.Network.Allow, applied.Allow) && slices.Equal(sb.Network.SetupAllow, applied.SetupAllow) && slices.Equal(sb.Network.Inject, applied.Inject) {
		return
	}
	err := s.applyInjection(s.ctx, sb)
	if err == nil {
		err = s.node.SetPolicy(sb.ID, sb.Network)
	}
	if err != nil {
		s.log.Error("apply the network policy changed during a start or wake", "sandbox", sb.ID, "err", err)
	}
}

// applyInjection gives a running sandbox's node the secrets its rules
// name, resolved now, and their placeholders (nothing without rules).
func (s *Core) applyInjection(ctx context.Context, sb api.Sandbox) error {
	if len(sb.Network.Inject) == 0 {
		return nil
	}
	return s.node.SetInjectSecrets(sb.ID, s.svc.Vault.Injection(ctx, sb))
}

// SecretChanged gives the nodes of the team's running sandboxes whose
// injection rules name the secret its value as it is now (set, replaced
// or deleted), for their next requests. Failures are logged: such a
// sandbox gets the value when it next wakes.
func (s *Core) SecretChanged(ctx context.Context, teamID, name string) {
	f := store.SandboxFilter{TeamID: teamID, States: []api.SandboxState{api.StateRunning}, Limit: 500}
	for {
		sbs, err := s.store.ListSandboxes(ctx, f)
		if err != nil {
			s.log.Error("list sandboxes for a changed secret", "team", teamID, "err", err)
			return
		}
		for _, sb := range sbs {
			if !namesSecret(sb.Network.Inject, name) {
				continue
			}
			if err := s.applyInjection(ctx, sb); err != nil {
				s.log.Warn("give a changed secret to a running sandbox", "sandbox", sb.ID, "secret", name, "err", err)
			}
		}
		if len(sbs) < f.Limit {
			return
		}
		f.After = sbs[len(sbs)-1].ID
	}
}

// namesSecret reports whether one of the rules names the secret.
func namesSecret(rules []api.InjectRule, name string) bool {
	for _, r := range InjectRules(rules) {
		if slices.Contains(r.SecretNames(), name) {
			return true
		}
	}
	return false
}

// checkSecretsExist says which secret named by an injection rule or a
// placeholder variable the team does not have: a 400 now, not a 502 at
// the first request.
func (s *Core) checkSecretsExist(ctx context.Context, teamID string, rules []api.InjectRule, refs map[string]api.SecretRef) error {
	type use struct{ name, field string }
	var uses []use
	for i, r := range InjectRules(rules) {
		for _, n := range r.SecretNames() {
			uses = append(uses, use{n, fmt.Sprintf("network.inject[%d]", i)})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(refs)) {
		if refs[k].Placeholder {
			uses = append(uses, use{refs[k].Secret, "secrets." + k})
		}
	}
	seen := map[string]bool{}
	for _, u := range uses {
		if seen[u.name] {
			continue
		}
		seen[u.name] = true
		_, err := s.store.GetSecret(ctx, teamID, u.name)
		if api.ErrorCode(err) == api.CodeNotFound {
			return &api.Error{
				Code:    api.CodeInvalidArgument,
				Message: fmt.Sprintf("%s: the team has no secret %q; create it with PUT /v1/secrets/%s first", u.field, u.name, u.name),
				Details: map[string]any{"field": u.field, "secret": u.name},
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// applyUpdate changes sb as req says, or says why it cannot.
func applyUpdate(sb *api.Sandbox, req api.UpdateSandboxRequest) error {
	if sb.State.Terminal() || sb.State == api.StateTerminating {
		return api.Errorf(api.CodeConflict, "sandbox %s is %s; it can no longer change", sb.ID, sb.State)
	}
	if req.IdleTimeoutS != nil {
		if *req.IdleTimeoutS < 0 {
			return invalid("idle_timeout_s is negative")
		}
		sb.IdleTimeoutS = *req.IdleTimeoutS
	}
	if req.OnIdle != nil {
		if *req.OnIdle != "sleep" && *req.OnIdle != "terminate" {
			return invalid("on_idle is %q; use sleep or terminate", *req.OnIdle)
		}
		sb.OnIdle = *req.OnIdle
	}
	if req.MaxLifetimeS != nil {
		if *req.MaxLifetimeS < 0 {
			return invalid("max_lifetime_s is negative")
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
			return invalid("spend_limit_usd is negative")
		}
		sb.SpendLimitUSD = req.SpendLimitUSD
	}
	var err error
	if req.OnBudget != nil {
		if sb.OnBudget, err = meter.ValidateOnBudget(*req.OnBudget); err != nil {
			return err
		}
	}
	if req.BudgetAlerts != nil {
		if sb.BudgetAlerts, err = meter.ValidateBudgetAlerts(*req.BudgetAlerts); err != nil {
			return err
		}
	}
	if req.Labels != nil {
		if err := validateLabels(req.Labels); err != nil {
			return err
		}
		sb.Labels = req.Labels
	}
	if req.Network != nil {
		allow, err := checkPolicy("network.allow", req.Network.Allow)
		if err != nil {
			return err
		}
		sb.Network.Allow = allow
		if req.Network.Inject != nil {
			if sb.Network.Inject, err = checkInject("network.inject", req.Network.Inject); err != nil {
				return err
			}
			if len(sb.Network.Inject) == 0 {
				sb.Network.Inject = nil
			}
		}
		if req.Network.SetupAllow != nil {
			if sb.Network.SetupAllow, err = checkPolicy("network.setup_allow", req.Network.SetupAllow); err != nil {
				return err
			}
		}
	}
	return nil
}
