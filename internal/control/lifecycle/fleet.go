package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// NodeLost settles a sandbox whose node a fleet lost or removed (the
// fleet's router calls it; internal/control/fleet): with a save it goes
// asleep and wakes from that save on another node, without one it fails;
// either way its running commands end lost and reason becomes its
// state_reason, so events and webhooks say what happened. A sandbox that
// is asleep or ended already is left as it is.
func (s *Core) NodeLost(ctx context.Context, sandboxID string, saved bool, reason string) error {
	o := s.opsFor(sandboxID)
	o.mu.Lock()
	defer o.mu.Unlock()
	sb, err := s.store.GetSandbox(ctx, "", sandboxID)
	if err != nil {
		return err
	}
	switch sb.State {
	case api.StateAsleep, api.StateTerminated, api.StateFailed:
		return nil
	case api.StateTerminating:
		s.finishTerminate(ctx, sb, sb.StateReason)
		return nil
	}
	if !saved {
		s.fail(ctx, sb, reason)
		return nil
	}
	s.loseCommands(ctx, sb.ID)
	return s.setState(ctx, &sb, api.StateAsleep, reason)
}

// nodeLost reports whether err says the sandbox's node is lost (a fleet's
// router answers so): the fleet settles such a sandbox through NodeLost,
// so the caller leaves it alone.
func nodeLost(err error) bool {
	var l interface{ NodeLost() bool }
	return errors.As(err, &l) && l.NodeLost()
}

// Reattach resumes a running sandbox on its node after that node's
// process started again (it registered in a new epoch): the node records
// the sandbox's running commands' output and reconnects its network
// again. A sandbox that is not running is left alone; a node that has it
// attached already answers at once.
func (s *Core) Reattach(ctx context.Context, sandboxID string) error {
	o := s.opsFor(sandboxID)
	o.mu.Lock()
	defer o.mu.Unlock()
	sb, err := s.store.GetSandbox(ctx, "", sandboxID)
	if err != nil {
		return err
	}
	if sb.State != api.StateRunning {
		return nil
	}
	cmds, err := s.runningCommands(ctx, sb.ID)
	if err != nil {
		return err
	}
	if err := s.attach(ctx, sb, cmds); err != nil {
		return err
	}
	s.log.Info("sandbox reattached on its node", "sandbox", sb.ID, "commands", len(cmds))
	return nil
}

// runningCommands are a sandbox's commands the store has running.
func (s *Core) runningCommands(ctx context.Context, sandboxID string) ([]api.Command, error) {
	cmds, err := s.store.ListCommands(ctx, store.CommandFilter{SandboxID: sandboxID, States: []api.CommandState{api.CommandRunning}})
	if err != nil {
		return nil, fmt.Errorf("list running commands of %s: %w", sandboxID, err)
	}
	return cmds, nil
}

// attach resumes a running sandbox on its node after the node's process
// (or this one) started again: the node records the output of cmds, the
// sandbox's running commands, and reconnects its network; their silence
// is watched again.
func (s *Core) attach(ctx context.Context, sb api.Sandbox, cmds []api.Command) error {
	running := make([]string, len(cmds))
	for i, c := range cmds {
		running[i] = c.ID
	}
	spec := s.spec(sb)
	spec.Secrets = s.svc.Vault.SandboxRedactions(ctx, sb)
	spec.Inject = s.svc.Vault.Injection(ctx, sb)
	var err error
	if spec.Volumes, err = s.volumeSpecs(ctx, sb); err != nil {
		return err
	}
	if err := s.node.Attach(ctx, spec, running); err != nil {
		return err
	}
	for _, c := range cmds {
		s.svc.Commands.WatchSilence(sb.TeamID, c)
	}
	return nil
}
