package lifecycle

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/netpolicy"
)

// checkPolicy validates a list of network grants and returns it (never
// nil).
func checkPolicy(field string, allow []string) ([]string, error) {
	if len(allow) > 256 {
		return nil, invalid("%s has %d entries; at most 256 are allowed", field, len(allow))
	}
	if _, err := netpolicy.Parse(allow); err != nil {
		return nil, invalid("%s: %v", field, err)
	}
	if allow == nil {
		allow = []string{}
	}
	return allow, nil
}

// NetworkDenied records a denial seen by the node's gateway or resolver as
// a network.denied event, naming the command that made the connection when
// the node found it and it is the sandbox's. The node rate-limits calls per
// destination and per sandbox; suppressed counts the sandbox's denials its
// per-sandbox rate held back since its previous call, which go into this
// event.
func (s *Core) NetworkDenied(sandboxID string, o api.NetworkObservation, suppressed int64) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	sb, err := s.store.GetSandbox(ctx, "", sandboxID)
	if err != nil {
		return // a warm sandbox nobody owns yet, or one just removed
	}
	data := map[string]any{"destination": o.Destination, "port": o.Port, "count": o.Count}
	if o.Reason != "" {
		data["reason"] = o.Reason
	}
	if suppressed > 0 {
		data["suppressed"] = suppressed
	}
	cmd := s.svc.Observations.CheckCommand(ctx, sandboxID, o.LastCommandID)
	s.svc.Events.Emit(ctx, sb.TeamID, "network.denied", sandboxID, cmd, data)
}
