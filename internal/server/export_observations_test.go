package server

import "context"

// FlushObservations stores the node's network reports, as the background
// flush does.
func (s *Server) FlushObservations(ctx context.Context) { s.flushObservations(ctx) }

// ExpireObservations runs the observation expiry of the background ticker.
func (s *Server) ExpireObservations(ctx context.Context) { s.expireObservations(ctx) }
