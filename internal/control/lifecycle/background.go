package lifecycle

import (
	"context"
	"sync"
	"time"
)

// Start runs the server's background work as the only replica: the
// replica's own work (StartReplica) and the singletons (Lead), until
// Close.
func (s *Core) Start() {
	s.StartReplica()
	s.wg.Go(func() { s.Lead(s.ctx) })
}

// StartReplica runs the work every replica does for itself, whether it
// leads or not: the network observations its node reported are flushed to
// the store, and the last activity it saw on sandboxes is persisted for
// the leader's idle checks. It returns at once; Close stops it.
func (s *Core) StartReplica() {
	s.wg.Go(func() { s.svc.Observations.Run(s.ctx) })
	s.wg.Go(func() {
		t := time.NewTicker(s.cfg.LimitsInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.limits.persist(s.ctx)
			case <-s.ctx.Done():
				return
			}
		}
	})
}

// Lead runs the singletons, which must run on one replica at a time (the
// leader's, internal/control/lease), until ctx ends or Close, and waits
// for them: the warm pool, the meter and budget checks, the workload
// queue, the idle and lifetime limits, the retention of events,
// idempotent answers and observations, and the transitions that dead
// replicas left.
func (s *Core) Lead(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	var wg sync.WaitGroup
	defer wg.Wait()
	if s.cfg.WarmPool > 0 || s.cfg.WarmPoolSetID > 0 {
		wg.Go(func() { s.pool.fill(ctx) })
	}
	wg.Go(func() { s.svc.Meter.Run(ctx) })
	wg.Go(func() { s.svc.Workloads.Run(ctx) })
	wg.Go(func() { s.watchVolumes(ctx) })
	t := time.NewTicker(s.cfg.LimitsInterval)
	defer t.Stop()
	adopt := time.NewTicker(adoptInterval)
	defer adopt.Stop()
	var expired time.Time
	for {
		select {
		case <-adopt.C:
			s.adoptOrphans(ctx)
		case <-t.C:
			s.limits.enforce(ctx)
			if time.Since(expired) > time.Minute {
				s.svc.Teams.ExpireIdempotent(ctx)
				s.svc.Events.Expire(ctx)
				s.svc.Observations.Expire(ctx)
				expired = time.Now()
			}
		case <-ctx.Done():
			return
		}
	}
}
