package server

import (
	"context"
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

// fitsPool reports whether a validated new sandbox can come from the pool.
func (s *Server) fitsPool(sb api.Sandbox) bool {
	return s.cfg.WarmPool > 0 && sb.Template == s.cfg.DefaultTemplate &&
		sb.Resources == s.cfg.DefaultResources && sb.Workdir == s.cfg.DefaultWorkdir
}

// takeWarm hands out a pooled sandbox ID, or "" when none is ready.
func (s *Server) takeWarm() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.warm) == 0 {
		return ""
	}
	id := s.warm[0]
	s.warm = s.warm[1:]
	select {
	case s.refill <- struct{}{}:
	default:
	}
	return id
}

// fillPool keeps the pool full until ctx is done, then removes what is
// left in it.
func (s *Server) fillPool(ctx context.Context) {
	defer s.drainPool()
	for {
		s.mu.Lock()
		missing := s.cfg.WarmPool - len(s.warm)
		s.mu.Unlock()
		if !s.svc.Templates.Ready(s.cfg.DefaultTemplate) {
			missing = 0 // filled when its build ends (TemplatesChanged)
		}
		for ; missing > 0 && ctx.Err() == nil; missing-- {
			sid := id.New("sbx")
			spec := s.spec(api.Sandbox{
				ID: sid, Template: s.cfg.DefaultTemplate, Resources: s.cfg.DefaultResources,
				Workdir: s.cfg.DefaultWorkdir,
			})
			ids, err := s.allocRange(ctx, sid)
			if err != nil {
				s.log.Warn("warm pool start", "err", err)
				break
			}
			spec.IDs = ids
			if err := s.node.Start(ctx, spec); err != nil {
				s.log.Warn("warm pool start", "err", err)
				s.discardWarm(ctx, sid)
				break // try again at the next refill or tick
			}
			s.mu.Lock()
			s.warm = append(s.warm, sid)
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.refill:
		case <-time.After(30 * time.Second):
		}
	}
}

// drainPool destroys the sandboxes waiting in the pool.
func (s *Server) drainPool() {
	s.mu.Lock()
	ids := s.warm
	s.warm = nil
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sid := range ids {
		if err := s.node.Destroy(ctx, sid); err != nil {
			s.log.Error("remove warm sandbox", "sandbox", sid, "err", err)
			continue
		}
		s.releaseRange(ctx, sid)
	}
}

// startWarm makes a persisted, pooled sandbox the one the request asked
// for: its hostname, then running. It reports false when the pooled
// sandbox could not be used; the caller then starts one cold.
func (s *Server) startWarm(ctx context.Context, sb *api.Sandbox) bool {
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
	return true
}

// discardWarm removes a pooled sandbox that was taken but not used, or
// whose start failed, and frees its range.
func (s *Server) discardWarm(ctx context.Context, sid string) {
	ctx = context.WithoutCancel(ctx)
	if err := s.node.Destroy(ctx, sid); err != nil {
		s.log.Error("remove unused warm sandbox", "sandbox", sid, "err", err)
		return
	}
	s.releaseRange(ctx, sid)
}

// WarmPool reports how many sandboxes wait in the pool, and how many it keeps.
func (s *Server) WarmPool() (ready, target int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.warm), s.cfg.WarmPool
}

// TemplatesChanged tells the server that a template's state changed (a
// build ended), so that the warm pool fills at once.
func (s *Server) TemplatesChanged() {
	select {
	case s.refill <- struct{}{}:
	default:
	}
}
