package server

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/observations"
	"github.com/cove-dev/cove/internal/node"
)

// Network observations are internal/control/observations'. What the core
// and the API call of them is delegated here.

// newObservations builds the server's observations service, over the
// node the server is given later (SetNode) and the server's clock.
func (s *Server) newObservations() *observations.Service {
	return observations.New(observations.Config{
		Flush: s.cfg.ObservationFlush, Max: s.cfg.MaxObservations, Retention: s.cfg.EventRetention,
	}, s.store, obsNode{s}, meterLife{s}, func() time.Time { return s.now() }, s.log)
}

// Observations is the server's network observations service, for the
// API's network reads.
func (s *Server) Observations() *observations.Service { return s.obs }

// runObservations stores the node's reports until the server closes,
// then once more.
func (s *Server) runObservations()                       { s.obs.Run(s.ctx) }
func (s *Server) flushObservations(ctx context.Context)  { s.obs.Flush(ctx) }
func (s *Server) expireObservations(ctx context.Context) { s.obs.Expire(ctx) }
func (s *Server) checkCommand(ctx context.Context, sandboxID, cmd string) string {
	return s.obs.CheckCommand(ctx, sandboxID, cmd)
}
func (s *Server) sandboxObservations(ctx context.Context, id string) ([]api.NetworkObservation, error) {
	return s.obs.Sandbox(ctx, id)
}

// obsNode reads the server's node when called, since it is set after New.
type obsNode struct{ s *Server }

func (n obsNode) DrainObservations() []node.Observation { return n.s.node.DrainObservations() }
func (n obsNode) PendingObservations(id string) []api.NetworkObservation {
	return n.s.node.PendingObservations(id)
}
