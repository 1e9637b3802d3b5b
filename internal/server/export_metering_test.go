package server

import (
	"context"
	"time"
)

// MeterOnce runs one tick of the meter.
func (s *Server) MeterOnce(ctx context.Context) { s.meterOnce(ctx) }

// SetClock makes the server read time from now.
func (s *Server) SetClock(now func() time.Time) { s.now = now }
