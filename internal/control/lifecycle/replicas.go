package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// Replicas is what the core knows of the replicas of the control plane
// sharing its store; without it (SetReplicas not called) the core is
// alone, as in tests.
type Replicas interface {
	// ReplicaID is this replica's ID.
	ReplicaID() string
	// Alive reports whether the replica id beat recently (this one
	// always is).
	Alive(ctx context.Context, id string) (bool, error)
	// OthersAlive reports whether any other replica beat recently.
	OthersAlive(ctx context.Context) (bool, error)
}

// SetReplicas tells the core of the replicas sharing its store; call it
// before Recover. The core then records which replica drives each
// transition, leaves alone the transitions of live replicas at Recover,
// and, leading, finishes those of dead ones.
func (s *Core) SetReplicas(r Replicas) { s.replicas = r }

// adoptInterval is how often the leader looks for transitions that a
// dead replica left.
const adoptInterval = 5 * time.Second

// transient are the states a replica drives a sandbox through; the
// replica that set one claims the sandbox.
var transient = []api.SandboxState{api.StateCreating, api.StateSettingUp, api.StateSleeping, api.StateWaking, api.StateTerminating}

func isTransient(state api.SandboxState) bool {
	for _, t := range transient {
		if t == state {
			return true
		}
	}
	return false
}

// claim records this replica as the one driving the sandbox's transition.
// A claim that cannot be stored is logged: the transition goes on, and is
// finished by Recover if this replica dies.
func (s *Core) claim(ctx context.Context, sandboxID string) {
	if s.replicas == nil {
		return
	}
	if err := s.store.ClaimSandbox(ctx, sandboxID, s.replicas.ReplicaID()); err != nil {
		s.log.Warn("record the replica driving a sandbox", "sandbox", sandboxID, "err", err)
	}
}

// ownedElsewhere reports whether the sandbox's transition is driven by
// another replica that is alive.
func (s *Core) ownedElsewhere(ctx context.Context, sandboxID string) bool {
	if s.replicas == nil {
		return false
	}
	owner, err := s.store.SandboxOwner(ctx, sandboxID)
	if err != nil || owner == "" || owner == s.replicas.ReplicaID() {
		return false
	}
	alive, err := s.replicas.Alive(ctx, owner)
	// A replica whose liveness cannot be read is taken as alive: its
	// transition is looked at again at the next sweep.
	return err != nil || alive
}

// adoptOrphans finishes the transitions whose replica died, as Recover
// does after a restart: the leader runs it every adoptInterval.
func (s *Core) adoptOrphans(ctx context.Context) {
	if s.replicas == nil {
		return
	}
	sbs, err := s.store.ListSandboxes(ctx, store.SandboxFilter{States: transient})
	if err != nil {
		s.log.Error("list sandboxes in transition", "err", err)
		return
	}
	for _, sb := range sbs {
		owner, err := s.store.SandboxOwner(ctx, sb.ID)
		if err != nil || owner == "" || owner == s.replicas.ReplicaID() {
			continue
		}
		if alive, err := s.replicas.Alive(ctx, owner); err != nil || alive {
			continue
		}
		// The sandbox is read again and claimed under its life-cycle
		// lock; recoverOne runs without it, as at Recover: finishing a
		// sleep takes the lock itself (sync.Mutex does not nest).
		o := s.opsFor(sb.ID)
		o.mu.Lock()
		cur, err := s.store.GetSandbox(ctx, "", sb.ID)
		adopt := err == nil && cur.State == sb.State
		if adopt {
			s.log.Warn("finishing a transition its replica left", "sandbox", sb.ID, "state", sb.State, "replica", owner)
			s.claim(ctx, sb.ID)
		}
		o.mu.Unlock()
		if adopt {
			s.recoverOne(ctx, cur, fmt.Sprintf("the control plane replica %s stopped", owner), map[string]bool{})
		}
	}
}
