package lifecycle

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/runs"
)

// SleepSandbox starts putting a running sandbox to sleep: its processes
// stop (running commands end lost, their output kept), its files are saved
// and its compute is released. Sleeping an asleep sandbox is a no-op.
func (s *Core) SleepSandbox(ctx context.Context, teamID, ref, reason string) (api.Sandbox, error) {
	return s.decide(ctx, teamID, ref, func(sb api.Sandbox, _ *sandboxOps) (api.Sandbox, error) {
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
	})
}

// finishSleep saves a sleeping sandbox and records it asleep.
func (s *Core) finishSleep(ctx context.Context, sb api.Sandbox) {
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
	if err != nil && nodeLost(err) {
		// The node went away during the sleep: the fleet settles the
		// sandbox from its last recorded save (NodeLost).
		s.log.Warn("sleep on a lost node", "sandbox", sb.ID, "err", err)
		return
	}
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
func (s *Core) WakeSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return s.decide(ctx, teamID, ref, func(sb api.Sandbox, _ *sandboxOps) (api.Sandbox, error) {
		switch sb.State {
		case api.StateRunning, api.StateWaking:
			return sb, nil
		case api.StateAsleep, api.StateSleeping:
			// A wake while sleeping runs once the sleep is done.
			if err := s.checks.Budget(ctx, runs.Spec{TeamID: sb.TeamID, Sandbox: &sb}); err != nil {
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
	})
}

func (s *Core) finishWake(ctx context.Context, teamID, id string) {
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
		spec.Secrets = s.svc.Vault.SandboxRedactions(ctx, sb)
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
	if err := s.setState(ctx, &sb, api.StateRunning, ""); err != nil {
		// Running but not recorded as such: the save stays, and Recover
		// settles the sandbox at the next start.
		s.log.Error("persist woken sandbox", "sandbox", id, "err", err)
		return
	}
	s.reapplyPolicy(sb, spec.Network)
	s.limits.touch(sb.ID, s.now())
	if s.cfg.KeepSaveAfterWake {
		return // the save stays the recovery point (a fleet's shared store)
	}
	if err := s.node.DropSave(ctx, id); err != nil {
		s.log.Warn("drop save after wake", "sandbox", id, "err", err)
	}
}

// runningCommandIDs are the IDs of a sandbox's running commands.
func (s *Core) runningCommandIDs(ctx context.Context, sandboxID string) ([]string, error) {
	cmds, err := s.runningCommands(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(cmds))
	for i, c := range cmds {
		ids[i] = c.ID
	}
	return ids, nil
}
