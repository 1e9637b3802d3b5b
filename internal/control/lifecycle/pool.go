package lifecycle

import (
	"context"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
)

// The warm pool keeps a few sandboxes of the default template with the
// default resources started and waiting, under IDs chosen in advance. A
// create request that fits takes one: the store row is written with the
// pooled ID, the hostname is set from the host, and the sandbox runs at
// once. Pooled sandboxes are not in the store; a restart removes them as
// orphans and the pool fills again.
//
// A sandbox's SetID is fixed when it starts (no_new_privs cannot be shed
// by a running process), so the pool keeps two kinds apart: WarmPool
// sandboxes without it, for every create, and WarmPoolSetID with it, for
// the creates that ask for it (E2B's). A create takes only its own kind.

// warmPool is the pool and the state it guards.
type warmPool struct {
	s *Core

	mu     sync.Mutex
	warm   map[bool][]string // IDs of started sandboxes in the pool, by SetID
	refill chan struct{}     // asks the pool to fill up
	taken  chan struct{}     // asks the pool to fill up after refillAfterTake
}

func newWarmPool(s *Core) *warmPool {
	return &warmPool{s: s, warm: map[bool][]string{}, refill: make(chan struct{}, 1), taken: make(chan struct{}, 1)}
}

// refillAfterTake is how long the pool waits after a take before it
// starts the sandbox that replaces the one handed out. That one runs its
// first commands meanwhile, most often within milliseconds of its
// create, rather than sharing the host's CPUs with a cold start (runc,
// the disk). A create in that moment that finds the pool empty starts
// cold, as one does while the refill runs.
const refillAfterTake = 200 * time.Millisecond

// target is how many sandboxes of a kind the pool keeps.
func (p *warmPool) target(setID bool) int {
	if setID {
		return p.s.cfg.WarmPoolSetID
	}
	return p.s.cfg.WarmPool
}

// fits reports whether a validated new sandbox can come from the pool.
func (p *warmPool) fits(sb api.Sandbox) bool {
	s := p.s
	return p.target(sb.SetID) > 0 && sb.Template == s.cfg.DefaultTemplate &&
		sb.Resources == s.cfg.DefaultResources && sb.Workdir == s.cfg.DefaultWorkdir
}

// take hands out the ID of a pooled sandbox whose SetID is setID, or ""
// when none is ready.
func (p *warmPool) take(setID bool) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.warm[setID]) == 0 {
		return ""
	}
	id := p.warm[setID][0]
	p.warm[setID] = p.warm[setID][1:]
	select {
	case p.taken <- struct{}{}:
	default:
	}
	return id
}

// changed asks the pool to fill up at once.
func (p *warmPool) changed() {
	select {
	case p.refill <- struct{}{}:
	default:
	}
}

// fill keeps the pool full until ctx is done, then removes what is left
// in it.
func (p *warmPool) fill(ctx context.Context) {
	defer p.drain()
	for {
		for _, setID := range []bool{false, true} {
			p.fillKind(ctx, setID)
		}
		select {
		case <-ctx.Done():
			return
		case <-p.refill:
		case <-p.taken:
			select {
			case <-ctx.Done():
				return
			case <-p.refill: // asked at once meanwhile
			case <-time.After(refillAfterTake):
			}
		case <-time.After(30 * time.Second):
		}
	}
}

// fillKind starts the sandboxes of one kind that the pool lacks.
func (p *warmPool) fillKind(ctx context.Context, setID bool) {
	s := p.s
	p.mu.Lock()
	missing := p.target(setID) - len(p.warm[setID])
	p.mu.Unlock()
	if !s.svc.Templates.Ready(s.cfg.DefaultTemplate) {
		missing = 0 // filled when its build ends (TemplatesChanged)
	}
	for ; missing > 0 && ctx.Err() == nil; missing-- {
		sid := id.New("sbx")
		spec := s.spec(api.Sandbox{
			ID: sid, Template: s.cfg.DefaultTemplate, Resources: s.cfg.DefaultResources,
			Workdir: s.cfg.DefaultWorkdir, SetID: setID,
		})
		ids, err := s.ranges.Alloc(ctx, sid)
		if err != nil {
			s.log.Warn("warm pool start", "err", err)
			break
		}
		spec.IDs = ids
		if err := s.node.Start(ctx, spec); err != nil {
			s.log.Warn("warm pool start", "err", err)
			p.discard(ctx, sid)
			break // try again at the next refill or tick
		}
		p.mu.Lock()
		p.warm[setID] = append(p.warm[setID], sid)
		p.mu.Unlock()
	}
}

// drain destroys the sandboxes waiting in the pool.
func (p *warmPool) drain() {
	s := p.s
	p.mu.Lock()
	ids := append(p.warm[false], p.warm[true]...)
	p.warm = map[bool][]string{}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sid := range ids {
		if err := s.node.Destroy(ctx, sid); err != nil {
			s.log.Error("remove warm sandbox", "sandbox", sid, "err", err)
			continue
		}
		s.ranges.Release(ctx, sid)
	}
}

// start makes a persisted, pooled sandbox the one the request asked for:
// its hostname, then running. It reports false when the pooled sandbox
// could not be used; the caller then starts one cold.
func (p *warmPool) start(ctx context.Context, sb *api.Sandbox) bool {
	s := p.s
	if err := s.node.SetPolicy(sb.ID, sb.Network); err != nil {
		s.log.Warn("warm sandbox policy", "sandbox", sb.ID, "err", err)
		return false
	}
	if err := s.node.SetHostname(ctx, sb.ID, hostname(*sb)); err != nil {
		s.log.Warn("warm sandbox hostname", "sandbox", sb.ID, "err", err)
		return false
	}
	o := s.opsFor(sb.ID)
	o.mu.Lock()
	defer o.mu.Unlock()
	// A PATCH since the row was written changed the stored policy only.
	cur, err := s.store.GetSandbox(ctx, sb.TeamID, sb.ID)
	if err != nil {
		s.log.Warn("read warm sandbox", "sandbox", sb.ID, "err", err)
		return false
	}
	if cur.State != api.StateCreating {
		// Terminated meanwhile: its terminator removes what runs.
		*sb = cur
		return true
	}
	if err := s.node.SetPolicy(sb.ID, cur.Network); err != nil {
		s.log.Warn("warm sandbox policy", "sandbox", sb.ID, "err", err)
		return false
	}
	*sb = cur
	if err := s.setState(ctx, sb, api.StateRunning, ""); err != nil {
		s.log.Error("persist warm sandbox running", "sandbox", sb.ID, "err", err)
		return false
	}
	s.reapplyPolicy(*sb, cur.Network)
	return true
}

// discard removes a pooled sandbox that was taken but not used, or whose
// start failed, and frees its range.
func (p *warmPool) discard(ctx context.Context, sid string) {
	s := p.s
	ctx = context.WithoutCancel(ctx)
	if err := s.node.Destroy(ctx, sid); err != nil {
		s.log.Error("remove unused warm sandbox", "sandbox", sid, "err", err)
		return
	}
	s.ranges.Release(ctx, sid)
}

// WarmPool reports how many sandboxes wait in the pool, and how many it
// keeps, of both kinds.
func (s *Core) WarmPool() (ready, target int) {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	return len(s.pool.warm[false]) + len(s.pool.warm[true]), s.cfg.WarmPool + s.cfg.WarmPoolSetID
}

// TemplatesChanged tells the server that a template's state changed (a
// build ended), so that the warm pool fills at once.
func (s *Core) TemplatesChanged() { s.pool.changed() }
