package lifecycle

import (
	"context"
	"time"
)

// SetClock makes the server read time from now.
func (s *Core) SetClock(now func() time.Time) { s.now = now }

// ExpireEvents runs the event expiry the background ticker runs.
func (s *Core) ExpireEvents(ctx context.Context) { s.svc.Events.Expire(ctx) }

// PollVolumes runs one measurement of the volumes in use, as the
// leader's ticker does.
func (s *Core) PollVolumes(ctx context.Context) { s.pollVolumes(ctx) }
