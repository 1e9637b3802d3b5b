package runs

import (
	"sync"

	"github.com/cove-dev/cove/internal/node"
)

// Receiver takes the exit reports of one run's commands: how each ended,
// or that it was lost with its container. The node's goroutines call it.
type Receiver interface {
	Exited(commandID string, e node.Exit, lost bool)
}

// ReceiverFunc is a Receiver as a function.
type ReceiverFunc func(commandID string, e node.Exit, lost bool)

// Exited calls f.
func (f ReceiverFunc) Exited(commandID string, e node.Exit, lost bool) { f(commandID, e, lost) }

// Exits routes the node's exit reports to the receiver registered for
// each run (by the ID the node knows it by); the reports of a run with
// none go to the fallback (a sandbox's commands, recorded in the store).
// The zero value is not usable; use NewExits.
type Exits struct {
	fallback func(runID, commandID string, e node.Exit, lost bool)

	mu sync.Mutex
	m  map[string]*entry
}

// entry is one registration; its address tells it from a later one.
type entry struct{ r Receiver }

// NewExits returns routes whose unregistered reports go to fallback.
func NewExits(fallback func(runID, commandID string, e node.Exit, lost bool)) *Exits {
	return &Exits{fallback: fallback, m: map[string]*entry{}}
}

// Register sends the exits of run runID to r until the returned func is
// called. A run has one receiver: registering again replaces it.
func (x *Exits) Register(runID string, r Receiver) (unregister func()) {
	en := &entry{r}
	x.mu.Lock()
	x.m[runID] = en
	x.mu.Unlock()
	return func() {
		x.mu.Lock()
		if x.m[runID] == en {
			delete(x.m, runID)
		}
		x.mu.Unlock()
	}
}

// Deliver hands one exit report to its run's receiver, or the fallback.
// It has the node.ExitFunc shape.
func (x *Exits) Deliver(runID, commandID string, e node.Exit, lost bool) {
	x.mu.Lock()
	en := x.m[runID]
	x.mu.Unlock()
	if en != nil {
		en.r.Exited(commandID, e, lost)
		return
	}
	if x.fallback != nil {
		x.fallback(runID, commandID, e, lost)
	}
}
