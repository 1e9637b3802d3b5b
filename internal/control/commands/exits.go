package commands

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// Exited records how a sandbox's command ended, then emits
// command.exited: the receiver of every run that registered none
// (runs.Exits' fallback). It waits for the command's start to be
// recorded first.
func (s *Service) Exited(sandboxID, commandID string, e node.Exit, lost bool) {
	unlock := s.locks.Lock(commandID)
	defer unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 30*time.Second)
	defer cancel()
	var (
		c       api.Command
		stored  api.Event // command.exited, stored with the exit
		updated bool      // the exit and its event stored together
	)
	// A command this service started is updated from what its start
	// stored; if it changed since (another replica recorded its end or
	// marked it lost), the update is stale and the rounds below read it.
	st, known := s.startedCommand(sandboxID, commandID)
	teamID := st.teamID
	// What was stored, for the waits under way; nil when nothing was.
	var final *api.Command
	defer func() { s.stored(commandID, final) }()
	for attempt := 1; ; attempt++ {
		// Each round reads the command again: another replica may have
		// recorded its end (or marked it lost) meanwhile, and an ended
		// command stays as it ended.
		var err error
		if attempt == 1 && known {
			c = st.cmd
		} else if c, err = s.d.Store.GetCommand(ctx, sandboxID, commandID); err != nil {
			if foreignRun(sandboxID, err) {
				// A workload's program (its receiver is registered on
				// the replica that started it), or a run this replica
				// has no record of: not an error of this replica's.
				s.d.Log.Debug("exit of a run not recorded as a command", "run", sandboxID, "command", commandID, "err", err)
				return
			}
			s.d.Log.Error("read a command to record its exit", "sandbox", sandboxID, "command", commandID, "err", err)
			return
		}
		if c.State.Done() {
			return
		}
		if teamID == "" {
			// Started elsewhere: its event goes to its sandbox's team.
			if sb, err := s.d.Store.GetSandbox(ctx, "", sandboxID); err == nil {
				teamID = sb.TeamID
			}
		}
		s.applyExit(&c, e, lost)
		s.readSizes(&c)
		if teamID != "" {
			// The exit and command.exited are stored in one transaction.
			ev := s.d.Events.Event("command.exited", sandboxID, commandID, map[string]any{
				"state": c.State, "exit_code": c.ExitCode, "signal": c.Signal, "timed_out": c.TimedOut,
			})
			stored, err = s.d.Store.UpdateCommandEvent(ctx, c, teamID, ev)
			updated = err == nil
		} else {
			err = s.d.Store.UpdateCommand(ctx, c)
		}
		if err == nil {
			c.Version++
			final = &c
			break
		}
		if api.ErrorCode(err) == api.CodeNotFound {
			// Deleted with its sandbox since its start was stored.
			s.d.Log.Debug("exit of a command no longer stored", "sandbox", sandboxID, "command", commandID)
			return
		}
		if !store.Stale(err) || attempt == store.UpdateAttempts {
			s.d.Log.Error("persist command exit", "command", commandID, "err", err)
			return
		}
	}
	s.d.Sandboxes.TouchAt(sandboxID, *c.EndedAt)
	s.d.Log.Info("command ended", "sandbox", sandboxID, "command", commandID, "state", c.State, "exit_code", e.ExitCode)
	if updated {
		s.d.Events.Appended(stored)
	}
	s.d.Sandboxes.Exited()
}

// foreignRun tells whether an exit that found no command is a run that
// is not a sandbox's command: a workload's program (its run is the
// workload, "wl_…"), which the replica that started it records, or a run
// the store has no command for (started by another replica and since
// deleted with its sandbox).
func foreignRun(runID string, err error) bool {
	return id.HasPrefix(runID, "wl") || api.ErrorCode(err) == api.CodeNotFound
}

func (s *Service) applyExit(c *api.Command, e node.Exit, lost bool) {
	t := s.endedAt(c.ID)
	c.EndedAt = &t
	c.Signal, c.TimedOut = e.Signal, e.TimedOut
	switch {
	case lost:
		c.State = api.CommandLost
	case e.TimedOut:
		c.State = api.CommandTimedOut
	case e.Signal != "":
		c.State = api.CommandKilled
	default:
		c.State = api.CommandExited
	}
	if !lost && e.Signal == "" {
		code := e.ExitCode
		c.ExitCode = &code
	}
}

// readSizes sets a command's output sizes from its recorded output.
func (s *Service) readSizes(c *api.Command) {
	l, err := s.d.Node.Output(c.SandboxID, c.ID)
	if err != nil {
		return
	}
	defer l.Close()
	c.StdoutBytes, c.StderrBytes = l.Sizes()
}

// WatchSilence raises command.no_output after every silence of the given
// length while the command runs: once per silence, re-armed by new
// output. Exec starts it; the core's Recover starts it again for the
// commands of a reattached sandbox.
func (s *Service) WatchSilence(teamID string, c api.Command) {
	if c.NoOutputAlertS <= 0 {
		return
	}
	l, err := s.d.Node.Output(c.SandboxID, c.ID)
	if err != nil {
		s.d.Log.Warn("watch a command's silence", "command", c.ID, "err", err)
		return
	}
	silence := time.Duration(c.NoOutputAlertS) * time.Second
	s.wg.Go(func() {
		defer l.Close()
		timer := time.NewTimer(silence)
		defer timer.Stop()
		alerted := false
		for {
			changed := l.Changed()
			if l.Ended() {
				return
			}
			select {
			case <-changed:
				alerted = false
				timer.Reset(silence)
			case <-timer.C:
				if !alerted {
					alerted = true
					s.d.Events.Emit(s.ctx, teamID, "command.no_output", c.SandboxID, c.ID, map[string]any{"silent_s": c.NoOutputAlertS})
				}
			case <-s.ctx.Done():
				return
			}
		}
	})
}
