package server

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// SleepSandbox starts putting a running sandbox to sleep: its processes
// stop (running commands end lost, their output kept), its files are saved
// and its compute is released. Sleeping an asleep sandbox is a no-op.
func (s *Server) SleepSandbox(ctx context.Context, teamID, ref, reason string) (api.Sandbox, error) {
	sb, o, err := s.lockSandbox(ctx, teamID, ref)
	if err != nil {
		return sb, err
	}
	defer o.mu.Unlock()
	switch sb.State {
	case api.StateSleeping, api.StateAsleep:
		return sb, nil
	case api.StateRunning:
	default:
		return sb, api.Errorf(api.CodeConflict, "sandbox %s is %s; only a running sandbox can sleep", sb.ID, sb.State)
	}
	if err := s.setState(ctx, &sb, api.StateSleeping, reason); err != nil {
		return sb, err
	}
	s.wg.Go(func() { s.finishSleep(s.ctx, sb) })
	return sb, nil
}

// finishSleep saves a sleeping sandbox and records it asleep.
func (s *Server) finishSleep(ctx context.Context, sb api.Sandbox) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Minute)
	defer cancel()
	o := s.opsFor(sb.ID)
	o.mu.Lock()
	defer o.mu.Unlock()
	if cur, err := s.store.GetSandbox(ctx, sb.TeamID, sb.ID); err != nil || cur.State != api.StateSleeping {
		return // terminated meanwhile
	}
	if running, err := s.runningCommandIDs(ctx, sb.ID); err == nil {
		s.node.Lose(sb.ID, running)
	}
	m, err := s.node.FinishSleep(ctx, sb.ID)
	if err != nil {
		s.log.Error("sleep", "sandbox", sb.ID, "err", err)
		s.persistState(ctx, &sb, api.StateFailed, "sleep could not save the files: "+userReason(err))
		return
	}
	s.log.Info("sandbox saved", "sandbox", sb.ID, "disk_bytes", m.DataBytes, "archive_bytes", m.ArchiveBytes)
	if err := s.store.SetStoredBytes(ctx, sb.ID, m.ArchiveBytes); err != nil {
		s.log.Error("record the size of a save", "sandbox", sb.ID, "err", err)
	}
	s.persistState(ctx, &sb, api.StateAsleep, sb.StateReason)
}

// WakeSandbox starts waking an asleep sandbox: same ID, name, env,
// resources and workdir, its files restored, its processes fresh. Waking a
// running or waking sandbox is a no-op.
func (s *Server) WakeSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	sb, o, err := s.lockSandbox(ctx, teamID, ref)
	if err != nil {
		return sb, err
	}
	defer o.mu.Unlock()
	switch sb.State {
	case api.StateRunning, api.StateWaking:
		return sb, nil
	case api.StateAsleep, api.StateSleeping:
		// A wake while sleeping runs once the sleep is done.
		if err := s.budgetRefusal(ctx, sb); err != nil {
			return sb, err
		}
	default:
		return sb, api.Errorf(api.CodeConflict, "sandbox %s is %s; only an asleep sandbox can wake", sb.ID, sb.State)
	}
	if sb.State == api.StateAsleep {
		if err := s.setState(ctx, &sb, api.StateWaking, ""); err != nil {
			return sb, err
		}
	}
	s.wg.Go(func() { s.finishWake(s.ctx, sb.TeamID, sb.ID) })
	return sb, nil
}

func (s *Server) finishWake(ctx context.Context, teamID, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Minute)
	defer cancel()
	o := s.opsFor(id)
	o.mu.Lock()
	defer o.mu.Unlock()
	sb, err := s.store.GetSandbox(ctx, teamID, id)
	if err != nil {
		return
	}
	if sb.State == api.StateAsleep { // it was sleeping when the wake came
		if err := s.setState(ctx, &sb, api.StateWaking, ""); err != nil {
			s.log.Error("persist waking", "sandbox", id, "err", err)
			return
		}
	}
	if sb.State != api.StateWaking {
		return
	}
	spec, err := s.startSpec(ctx, sb)
	if err == nil {
		spec.Secrets = s.sandboxRedactions(ctx, sb)
		err = s.node.Wake(ctx, spec)
	}
	if err != nil {
		s.log.Error("wake", "sandbox", id, "err", err)
		if derr := s.node.DestroyRuntime(ctx, id); derr != nil {
			s.log.Error("remove runtime of failed wake", "sandbox", id, "err", derr)
		}
		// The save is intact: the sandbox stays asleep and can be woken again.
		s.persistState(ctx, &sb, api.StateAsleep, "wake failed: "+userReason(err))
		return
	}
	sb.StartedAt = nil // a new start
	if err := s.setState(ctx, &sb, api.StateRunning, ""); err != nil {
		// Running but not recorded as such: the save stays, and Recover
		// settles the sandbox at the next start.
		s.log.Error("persist woken sandbox", "sandbox", id, "err", err)
		return
	}
	s.touch(sb.ID)
	if err := s.node.DropSave(ctx, id); err != nil {
		s.log.Warn("drop save after wake", "sandbox", id, "err", err)
	}
}

// spec is what the node needs to start a sandbox.
func (s *Server) spec(sb api.Sandbox) node.SandboxSpec {
	return node.SandboxSpec{
		ID: sb.ID, Hostname: hostname(sb), Template: s.nodeTemplate(sb.TeamID, sb.Template),
		Resources: sb.Resources, Pids: s.cfg.PidsLimit, Workdir: sb.Workdir,
		Network: sb.Network,
	}
}

func (s *Server) runningCommandIDs(ctx context.Context, sandboxID string) ([]string, error) {
	cmds, err := s.store.ListCommands(ctx, store.CommandFilter{SandboxID: sandboxID, States: []api.CommandState{api.CommandRunning}})
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(cmds))
	for i, c := range cmds {
		ids[i] = c.ID
	}
	return ids, nil
}

// touch records activity on a sandbox now.
func (s *Server) touch(id string) { s.touchAt(id, s.now()) }

func (s *Server) touchAt(id string, t time.Time) {
	s.mu.Lock()
	if t.After(s.activity[id]) {
		s.activity[id] = t
	}
	s.mu.Unlock()
}

// Start runs the server's background work: idle and lifetime limits and
// the warm pool. It returns at once; Close stops it.
func (s *Server) Start() {
	if s.cfg.WarmPool > 0 {
		s.wg.Go(func() { s.fillPool(s.ctx) })
	}
	s.wg.Go(func() { s.runMeter(s.ctx) })
	s.wg.Go(func() { s.wl.Run(s.ctx) })
	s.wg.Go(s.runObservations)
	s.wg.Go(func() {
		t := time.NewTicker(s.cfg.LimitsInterval)
		defer t.Stop()
		var expired time.Time
		for {
			select {
			case <-t.C:
				s.enforceLimits(s.ctx)
				if time.Since(expired) > time.Minute {
					s.expireIdempotent(s.ctx)
					s.expireEvents(s.ctx)
					s.expireObservations(s.ctx)
					expired = time.Now()
				}
			case <-s.ctx.Done():
				return
			}
		}
	})
}

// enforceLimits applies max_lifetime_s to sandboxes running or in setup
// and idle_timeout_s to running ones, and persists their last activity.
func (s *Server) enforceLimits(ctx context.Context) {
	running, err := s.store.ListSandboxes(ctx, store.SandboxFilter{States: []api.SandboxState{api.StateRunning, api.StateSettingUp}})
	if err != nil {
		s.log.Error("list sandboxes for limits", "err", err)
		return
	}
	now := s.now()
	for _, sb := range running {
		expired := sb.ExpiresAt != nil && !now.Before(*sb.ExpiresAt)
		if sb.State == api.StateSettingUp {
			// A setup holds what a running sandbox holds, for up to its
			// own timeout: its lifetime bounds it too.
			if expired {
				reason := fmt.Sprintf("max_lifetime_s (%d s) reached during setup", sb.MaxLifetimeS)
				if s.failSetup(ctx, sb, reason) {
					s.emit(ctx, sb.TeamID, "sandbox.expired", sb.ID, "", map[string]any{"max_lifetime_s": sb.MaxLifetimeS})
				}
			}
			continue
		}
		if expired {
			s.emit(ctx, sb.TeamID, "sandbox.expired", sb.ID, "", map[string]any{"max_lifetime_s": sb.MaxLifetimeS})
			if _, err := s.TerminateSandbox(ctx, sb.TeamID, sb.ID); err != nil {
				s.log.Error("terminate at end of lifetime", "sandbox", sb.ID, "err", err)
			}
			continue
		}
		last := s.lastActive(ctx, sb, now)
		if sb.IdleTimeoutS > 0 && now.Sub(last) >= time.Duration(sb.IdleTimeoutS)*time.Second {
			s.emit(ctx, sb.TeamID, "sandbox.idle", sb.ID, "", map[string]any{
				"idle_s": int64(now.Sub(last).Seconds()), "on_idle": sb.OnIdle,
			})
			var err error
			if sb.OnIdle == "terminate" {
				_, err = s.TerminateSandbox(ctx, sb.TeamID, sb.ID)
			} else {
				_, err = s.SleepSandbox(ctx, sb.TeamID, sb.ID, "idle for "+time.Duration(sb.IdleTimeoutS*int64(time.Second)).String())
			}
			if err != nil {
				s.log.Error("act on idle sandbox", "sandbox", sb.ID, "err", err)
			}
		}
	}
}

// lastActive is the sandbox's last activity: an API call on it, or now
// while any of its commands runs. It persists last_active_at when it moved.
func (s *Server) lastActive(ctx context.Context, sb api.Sandbox, now time.Time) time.Time {
	last := sb.CreatedAt
	if sb.LastActiveAt != nil {
		last = *sb.LastActiveAt
	}
	s.mu.Lock()
	if t, ok := s.activity[sb.ID]; ok && t.After(last) {
		last = t
	}
	s.mu.Unlock()
	if ids, err := s.runningCommandIDs(ctx, sb.ID); err == nil && len(ids) > 0 {
		last = now
	}
	if sb.LastActiveAt == nil || last.After(*sb.LastActiveAt) {
		o := s.opsFor(sb.ID)
		o.mu.Lock()
		if cur, err := s.store.GetSandbox(ctx, sb.TeamID, sb.ID); err == nil && cur.State == api.StateRunning {
			cur.LastActiveAt = &last
			if err := s.store.UpdateSandbox(ctx, cur); err != nil {
				s.log.Warn("persist last activity", "sandbox", sb.ID, "err", err)
			}
		}
		o.mu.Unlock()
	}
	return last
}
