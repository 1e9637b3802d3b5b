package lifecycle

import (
	"context"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/gitsource"
	"github.com/cove-dev/cove/internal/store"
)

// SecretResolver turns a team's secret names into their values. The
// secrets store implements it; until one is set (SetSecretResolver),
// requests that name secrets (setup.secrets, source.auth_secret) answer
// 422.
type SecretResolver interface {
	// ResolveSecrets returns the value of each named secret of the team,
	// by the same keys as names (env var → secret name). A name the team
	// has no secret of answers CodeNotFound or CodeUnprocessable.
	ResolveSecrets(ctx context.Context, teamID string, names map[string]string) (map[string]string, error)
}

// SetSecretResolver replaces the secrets store's resolution (tests); call
// it before serving.
func (s *Core) SetSecretResolver(r SecretResolver) { s.secrets = r }

// storeSecrets resolves names through the server's own secrets store.
type storeSecrets struct{ s *Core }

func (r storeSecrets) ResolveSecrets(ctx context.Context, teamID string, names map[string]string) (map[string]string, error) {
	return r.s.svc.Vault.Values(ctx, teamID, names)
}

// provision brings a started sandbox's files to what its create asked
// for: the source, then the setup. It runs in the start's goroutine,
// without the life-cycle lock; a terminate cancels ctx. keepOutput says a
// failure should keep the sandbox's recorded output (a setup that ran).
func (s *Core) provision(ctx context.Context, sb *api.Sandbox, upload chan *uploadReq) (keepOutput bool, err error) {
	if src := sb.Source; src != nil {
		switch src.Type {
		case api.SourceUpload:
			if err := s.awaitUpload(ctx, sb, upload); err != nil {
				return false, err
			}
		case api.SourceAsset:
			if err := s.extractAsset(ctx, sb); err != nil {
				return false, err
			}
		case api.SourceGit:
			if err := s.cloneGit(ctx, sb); err != nil {
				return false, err
			}
		}
	}
	if sb.Setup == nil || sb.Setup.Command == "" {
		return false, nil
	}
	if sb.Setup.Cache {
		if hit, err := s.setups.Start(ctx, sb); hit || err != nil {
			if hit && err == nil {
				err = s.updateProvision(ctx, sb, "", func(p *api.Provision) { p.SetupCached = true })
			}
			return false, err
		}
	}
	if err := s.runSetup(ctx, sb); err != nil {
		return true, err
	}
	if sb.Setup.Cache {
		return false, s.setups.Save(ctx, sb)
	}
	return false, nil
}

// extractAsset extracts the sandbox's asset into its workdir and records
// its digest.
func (s *Core) extractAsset(ctx context.Context, sb *api.Sandbox) error {
	digest, err := s.svc.Assets.Land(ctx, sb.TeamID, sb.ID, sb.Workdir, sb.Source.AssetID, s.svc.Images.DefaultUser(*sb))
	if err != nil {
		return err
	}
	return s.updateProvision(ctx, sb, "", func(p *api.Provision) { p.Source.Digest = digest })
}

// updateProvision persists a change to a sandbox that is still being
// provisioned (creating or setting_up) under its life-cycle lock: its
// state reason and, through change, its provision. A sandbox terminated
// meanwhile answers the context's error.
func (s *Core) updateProvision(ctx context.Context, sb *api.Sandbox, reason string, change func(*api.Provision)) error {
	o := s.opsFor(sb.ID)
	o.mu.Lock()
	defer o.mu.Unlock()
	pctx := context.WithoutCancel(ctx)
	for attempt := 1; ; attempt++ {
		// Read again each round: a PATCH through another replica may
		// have changed the row, and its change is kept.
		cur, err := s.store.GetSandbox(pctx, sb.TeamID, sb.ID)
		if err != nil {
			return err
		}
		if cur.State != api.StateCreating && cur.State != api.StateSettingUp {
			return context.Canceled
		}
		cur.StateReason = reason
		if change != nil {
			change(&cur.Provision)
		}
		err = s.store.UpdateSandbox(pctx, cur)
		if store.Stale(err) && attempt < store.UpdateAttempts {
			continue
		}
		if err != nil {
			return fmt.Errorf("persist provision of %s: %w", sb.ID, err)
		}
		cur.Version++
		*sb = cur
		s.notify()
		return nil
	}
}

// setupFailed is a setup that ran and did not succeed: its reason is the
// sandbox's state reason as it is.
type setupFailed struct{ reason string }

func (e *setupFailed) Error() string { return e.reason }

// failSetup stops a sandbox's setup for a limit it reached (spend limit,
// max_lifetime_s): a sandbox in setup cannot sleep, so it fails, with
// reason as its state_reason. The start's goroutine records the failure
// and removes the container, keeping the setup's output. It reports
// whether the sandbox was in setup.
func (s *Core) failSetup(ctx context.Context, sb api.Sandbox, reason string) bool {
	cur, o, err := s.lockSandbox(ctx, sb.TeamID, sb.ID)
	if err != nil {
		s.log.Error("read sandbox to stop its setup", "sandbox", sb.ID, "err", err)
		return false
	}
	defer o.mu.Unlock()
	if cur.State != api.StateSettingUp || o.cancelStart == nil {
		return false
	}
	s.log.Info("setup stopped at a limit", "sandbox", sb.ID, "reason", reason)
	o.cancelStart(&setupFailed{reason})
	// Stopped once: the next look at the limits, before the start's
	// goroutine has recorded the failure, finds nothing to stop (a
	// terminate still waits for that goroutine through starting).
	o.cancelStart = nil
	return true
}

// runSetup runs the setup command as a recorded command of the sandbox,
// under the setup network policy when it has one, and waits for its end.
func (s *Core) runSetup(ctx context.Context, sb *api.Sandbox) error {
	st := sb.Setup
	o := s.opsFor(sb.ID)
	o.mu.Lock()
	cur, err := s.store.GetSandbox(context.WithoutCancel(ctx), sb.TeamID, sb.ID)
	if err == nil && cur.State != api.StateCreating {
		err = context.Canceled
	}
	if err == nil {
		err = s.setState(context.WithoutCancel(ctx), &cur, api.StateSettingUp, "")
	}
	o.mu.Unlock()
	if err != nil {
		return err
	}
	*sb = cur
	run := setupRun(*sb)
	// Secrets go as the command's own: resolved when it starts and
	// redacted from its output, as for any command.
	req := api.CreateCommandRequest{Command: run.Command, Env: run.Env, Secrets: run.Secrets, TimeoutS: &run.TimeoutS}
	setupPolicy := st.Network != nil
	if setupPolicy {
		s.node.UseSetupPolicy(sb.ID, true)
	}
	exited := s.watchExit()
	cmd, err := s.svc.Commands.Start(ctx, *sb, req)
	if err != nil {
		exited.stop()
		if setupPolicy {
			s.node.UseSetupPolicy(sb.ID, false)
		}
		return fmt.Errorf("start the setup command: %w", err)
	}
	if err := s.updateProvision(ctx, sb, "", func(p *api.Provision) { p.SetupCommandID = cmd.ID }); err != nil {
		exited.stop()
		return err
	}
	c, err := exited.wait(ctx, sb.ID, cmd.ID)
	if setupPolicy {
		// The sandbox's own policy from here on: one switch in the
		// registry, for every new connection and lookup.
		s.node.UseSetupPolicy(sb.ID, false)
	}
	if err != nil {
		return err
	}
	data := map[string]any{"state": c.State, "exit_code": c.ExitCode, "signal": c.Signal, "timed_out": c.TimedOut}
	s.svc.Events.Emit(context.WithoutCancel(ctx), sb.TeamID, "setup.exited", sb.ID, cmd.ID, data)
	switch {
	case c.State == api.CommandExited && c.ExitCode != nil && *c.ExitCode == 0:
		return nil
	case c.TimedOut:
		return &setupFailed{fmt.Sprintf("setup command %s timed out after %d s; its output stays readable", cmd.ID, st.TimeoutS)}
	case c.ExitCode != nil:
		return &setupFailed{fmt.Sprintf("setup command %s exited with code %d; its output stays readable", cmd.ID, *c.ExitCode)}
	case c.Signal != "":
		return &setupFailed{fmt.Sprintf("setup command %s was killed by SIG%s; its output stays readable", cmd.ID, c.Signal)}
	}
	return &setupFailed{fmt.Sprintf("setup command %s ended %s", cmd.ID, c.State)}
}

// exitWatch waits for the end of a command the server started itself.
type exitWatch struct {
	s  *Core
	ch chan struct{}
}

// watchExit returns a watch that sees every command exit from now on.
func (s *Core) watchExit() *exitWatch {
	w := &exitWatch{s: s, ch: make(chan struct{}, 1)}
	s.mu.Lock()
	s.exitWatchers[w] = struct{}{}
	s.mu.Unlock()
	return w
}

func (w *exitWatch) stop() {
	w.s.mu.Lock()
	delete(w.s.exitWatchers, w)
	w.s.mu.Unlock()
}

// wait returns the command once the store has its end.
func (w *exitWatch) wait(ctx context.Context, sandboxID, commandID string) (api.Command, error) {
	defer w.stop()
	for {
		c, err := w.s.store.GetCommand(context.WithoutCancel(ctx), sandboxID, commandID)
		if err != nil {
			return c, err
		}
		if c.State.Done() {
			return c, nil
		}
		select {
		case <-w.ch:
		case <-ctx.Done():
			return c, ctx.Err()
		}
	}
}

// exited wakes the watchers: a command ended.
func (s *Core) exited() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.exitWatchers {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// cloneGit clones the sandbox's git source into its workdir; the node
// clones apart from the sandbox and hands it the tree. The token, when
// auth_secret names one, goes to the node alone.
func (s *Core) cloneGit(ctx context.Context, sb *api.Sandbox) error {
	commit, err := s.cloneSource().Clone(ctx, sb.TeamID, sb.ID, sb.Workdir, *sb.Source, s.svc.Images.DefaultUser(*sb))
	if err != nil {
		return err
	}
	return s.updateProvision(ctx, sb, "", func(p *api.Provision) { p.Source.Digest = commit })
}

// cloneSource is the git sources' cloner over the core's node, host ID
// ranges and secrets.
func (s *Core) cloneSource() *gitsource.Cloner {
	c := &gitsource.Cloner{Node: s.node, Ranges: s.ranges}
	if s.secrets != nil {
		c.Secrets = s.secrets
	}
	return c
}
