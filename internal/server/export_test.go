package server

import (
	"context"
	"time"
)

// SetClock makes the server read time from now.
func (s *Server) SetClock(now func() time.Time) { s.now = now }

// ExpireEvents runs the event expiry the background ticker runs.
func (s *Server) ExpireEvents(ctx context.Context) { s.expireEvents(ctx) }
