package lifecycle

import (
	"context"
	"time"
)

// SetClock makes the server read time from now.
func (s *Core) SetClock(now func() time.Time) { s.now = now }

// ExpireEvents runs the event expiry the background ticker runs.
func (s *Core) ExpireEvents(ctx context.Context) { s.svc.Events.Expire(ctx) }
