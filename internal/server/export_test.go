package server

import "context"

// ExpireEvents runs the event expiry the background ticker runs.
func (s *Server) ExpireEvents(ctx context.Context) { s.expireEvents(ctx) }
