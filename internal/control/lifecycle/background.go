package lifecycle

import "time"

// Start runs the server's background work: idle and lifetime limits and
// the warm pool. It returns at once; Close stops it.
func (s *Core) Start() {
	if s.cfg.WarmPool > 0 {
		s.wg.Go(func() { s.pool.fill(s.ctx) })
	}
	s.wg.Go(func() { s.svc.Meter.Run(s.ctx) })
	s.wg.Go(func() { s.svc.Workloads.Run(s.ctx) })
	s.wg.Go(func() { s.svc.Observations.Run(s.ctx) })
	s.wg.Go(func() {
		t := time.NewTicker(s.cfg.LimitsInterval)
		defer t.Stop()
		var expired time.Time
		for {
			select {
			case <-t.C:
				s.limits.enforce(s.ctx)
				if time.Since(expired) > time.Minute {
					s.svc.Teams.ExpireIdempotent(s.ctx)
					s.svc.Events.Expire(s.ctx)
					s.svc.Observations.Expire(s.ctx)
					expired = time.Now()
				}
			case <-s.ctx.Done():
				return
			}
		}
	})
}
