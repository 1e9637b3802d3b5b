package lifecycle

import (
	"time"

	"github.com/cove-dev/cove/api"
)

// Telemetry is told what the control plane does, for the operators'
// Prometheus metrics (internal/telemetry). Calls must not block.
type Telemetry interface {
	// Event is every event appended to a team's log.
	Event(e api.Event)
	// Exec is how long a command took to start.
	Exec(d time.Duration)
}

type noTelemetry struct{}

func (noTelemetry) Event(api.Event)    {}
func (noTelemetry) Exec(time.Duration) {}

// SetTelemetry sends what the control plane does to m; call it before
// Start.
func (s *Core) SetTelemetry(m Telemetry) { s.telemetry = m }
