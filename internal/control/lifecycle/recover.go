package lifecycle

import (
	"context"
	"fmt"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// Recover makes the store and the node agree after a start: sandboxes that
// were running are reattached or failed and cleaned up; starts and
// terminations cut short by a crash are finished; containers and state the
// store does not know as live are removed. Nothing is left orphaned or
// silently forgotten.
func (s *Core) Recover(ctx context.Context) error {
	if err := s.svc.Images.Load(ctx); err != nil {
		return fmt.Errorf("load images: %w", err)
	}
	live, err := s.store.ListSandboxes(ctx, store.SandboxFilter{States: []api.SandboxState{
		api.StateCreating, api.StateSettingUp, api.StateRunning, api.StateSleeping,
		api.StateWaking, api.StateTerminating,
	}})
	if err != nil {
		return fmt.Errorf("list live sandboxes: %w", err)
	}
	if err := s.svc.Previews.PublishAll(ctx); err != nil {
		return fmt.Errorf("publish previews: %w", err)
	}
	keep, err := s.svc.Workloads.Recover(ctx)
	if err != nil {
		return err
	}
	for _, sb := range live {
		if sb.State != api.StateRunning && s.ownedElsewhere(ctx, sb.ID) {
			// Another replica drives it now: its state is that replica's.
			keep[sb.ID] = true
			continue
		}
		if err := s.recoverOne(ctx, sb, "the server restarted", keep); err != nil {
			return err
		}
	}
	if err := s.removeOrphans(ctx, keep); err != nil {
		return err
	}
	// Ranges of sandboxes that ended while their release could not be
	// persisted, or whose cleanup a crash cut short, are freed now.
	if err := s.ranges.Collect(ctx, s.node); err != nil {
		s.log.Error("release host id ranges of ended sandboxes", "err", err)
	}
	return nil
}

// removeOrphans removes what the node holds of sandboxes the store does
// not know as live (keep: those recovered). With other replicas alive,
// the node's sandboxes the store does not know may be theirs (a warm
// pool's, a create between its admission and its row): they are left
// alone.
func (s *Core) removeOrphans(ctx context.Context, keep map[string]bool) error {
	if s.replicas != nil {
		if others, err := s.replicas.OthersAlive(ctx); err != nil || others {
			return nil
		}
	}
	known, err := s.node.Known(ctx)
	if err != nil {
		return fmt.Errorf("list node sandboxes: %w", err)
	}
	for _, id := range known {
		if keep[id] {
			continue
		}
		if sb, err := s.store.GetSandbox(ctx, "", id); err == nil && sb.State == api.StateAsleep {
			// A runtime left beside a complete save: only the runtime goes.
			if err := s.node.DestroyRuntime(ctx, id); err != nil {
				s.log.Error("remove runtime of asleep sandbox", "sandbox", id, "err", err)
			}
			continue
		}
		s.log.Warn("removing orphaned sandbox state", "sandbox", id)
		if err := s.node.Destroy(ctx, id); err != nil {
			s.log.Error("remove orphaned sandbox", "sandbox", id, "err", err)
		}
	}
	return nil
}

// ResumedWake begins the state reason of a sandbox whose wake was cut
// short (its replica stopped) and is being finished from its save.
const ResumedWake = "resuming a wake cut short: "

// recoverOne makes one live sandbox's store and node agree: a running one
// is reattached (kept in keep) or failed, a transition cut short is
// finished. why says what cut it short, for the state reasons.
func (s *Core) recoverOne(ctx context.Context, sb api.Sandbox, why string, keep map[string]bool) error {
	switch sb.State {
	case api.StateRunning:
		cmds, err := s.runningCommands(ctx, sb.ID)
		if err != nil {
			return err
		}
		if err := s.attach(ctx, sb, cmds); err != nil {
			if nodeLost(err) {
				// Its node did not come back: the fleet settles it.
				s.log.Warn("sandbox's node is lost", "sandbox", sb.ID, "err", err)
				keep[sb.ID] = true
				return nil
			}
			s.log.Warn("sandbox lost on restart", "sandbox", sb.ID, "err", err)
			s.fail(ctx, sb, "the server restarted and could not reattach: "+userReason(err))
			return nil
		}
		s.log.Info("sandbox reattached", "sandbox", sb.ID, "commands", len(cmds))
		keep[sb.ID] = true
	case api.StateTerminating:
		s.finishTerminate(ctx, sb, sb.StateReason)
	case api.StateSleeping:
		// Finish the sleep from wherever it stopped: the sandbox ends
		// asleep with a complete save (or failed, its files kept).
		s.finishSleep(ctx, sb)
	case api.StateWaking:
		if snap, ok := strings.CutPrefix(sb.StateReason, Restoring); ok {
			// A restore cut short is finished: its sandbox runs on the
			// snapshot's files (or fails, saying why).
			o := s.opsFor(sb.ID)
			o.mu.Lock()
			defer o.mu.Unlock()
			cur, err := s.store.GetSandbox(ctx, sb.TeamID, sb.ID)
			if err != nil || cur.State != sb.State || cur.StateReason != sb.StateReason {
				return nil // finished or ended meanwhile
			}
			got, err := s.finishRestore(ctx, cur, snap)
			if err == nil && got.State == api.StateRunning {
				keep[sb.ID] = true
				s.log.Info("restore finished after a restart", "sandbox", sb.ID, "snapshot", snap)
			}
			return nil
		}
		if err := s.node.DestroyRuntime(ctx, sb.ID); err != nil {
			s.log.Error("remove half-woken runtime", "sandbox", sb.ID, "err", err)
		}
		if strings.HasPrefix(sb.StateReason, ResumedWake) {
			// Cut short again: the wake may be what ends its replica.
			// The save is intact.
			s.persistState(ctx, &sb, api.StateAsleep, why+" while the sandbox was waking a second time; wake it again")
			return nil
		}
		// A wake was asked for and answered: it is finished from the
		// save, once.
		if err := s.setState(ctx, &sb, api.StateWaking, ResumedWake+why); err != nil {
			s.log.Error("resume wake", "sandbox", sb.ID, "err", err)
			return nil
		}
		keep[sb.ID] = true
		s.finishWake(ctx, sb.TeamID, sb.ID)
		s.log.Info("wake finished after it was cut short", "sandbox", sb.ID, "why", why)
	default:
		s.fail(ctx, sb, fmt.Sprintf("%s while the sandbox was %s", why, sb.State))
	}
	return nil
}

// fail marks a sandbox failed with a reason after removing what is left of
// it; its running commands become lost.
func (s *Core) fail(ctx context.Context, sb api.Sandbox, reason string) {
	s.loseCommands(ctx, sb.ID)
	if err := s.node.Destroy(ctx, sb.ID); err != nil {
		s.log.Error("clean up failed sandbox", "sandbox", sb.ID, "err", err)
		reason += "; cleanup incomplete: " + userReason(err)
	} else {
		s.ranges.Release(ctx, sb.ID)
	}
	s.persistState(ctx, &sb, api.StateFailed, reason)
}
