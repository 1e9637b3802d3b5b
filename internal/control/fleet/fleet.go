// Package fleet is the control plane's view of its nodes (`cove control`):
// the registry the join service admits nodes through (epochs, heartbeats,
// loss, drain, removal) and the placement router, the one lifecycle.Node
// of the core, which places each sandbox on a node with room and sends
// every later call for it to that node through a per-node client.
//
// The router is the only place that knows where a sandbox runs; the core
// stays the only writer of sandbox state: a lost node's sandboxes go
// asleep or failed through Sandboxes.NodeLost, so events and webhooks say
// it.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// NodeClient is one node's side of the router's calls: the node's
// contract and its ports, plus the meter's Stats
// (internal/control/fleet/remote implements it over the node API; tests
// use nodetest).
type NodeClient interface {
	node.Contract
	node.Ports
	Stats(ctx context.Context, ids []string) map[string]node.Stats
}

// Sandboxes is what the router asks of the lifecycle core, the only writer
// of sandbox state.
type Sandboxes interface {
	// NodeLost settles a sandbox whose node was lost or removed: asleep
	// (saved: it wakes from its recorded save) or failed, its running
	// commands lost, with reason as its state_reason.
	NodeLost(ctx context.Context, sandboxID string, saved bool, reason string) error
	// Reattach resumes a running sandbox on its node after the node
	// registered again (its process may have started again): its running
	// commands are recorded and its network reconnected.
	Reattach(ctx context.Context, sandboxID string) error
}

// Config is the fleet's configuration; zero fields take their defaults.
type Config struct {
	// Store keeps nodes and placements.
	Store store.Fleet
	// Dial makes the client of a node that registered at addr. It is
	// called under the fleet's lock, so it connects lazily and returns at
	// once; a client that is an io.Closer is closed when the node
	// registers again, is lost or removed.
	Dial func(nodeID, addr string) (NodeClient, error)
	// LostAfter is how long a node may stay silent before it is lost;
	// after a restart of the control plane it is also how long calls wait
	// for a node that has not registered again. Default 15 seconds.
	LostAfter time.Duration
	// Heartbeat is how often nodes are asked to send a heartbeat.
	// Default LostAfter / 5.
	Heartbeat time.Duration
	// CPUOvercommit and MemoryOvercommit multiply a node's capacity for
	// placement. Default 1 (none).
	CPUOvercommit, MemoryOvercommit float64
	Log                             *slog.Logger
}

// DefaultLostAfter is Config.LostAfter's default.
const DefaultLostAfter = 15 * time.Second

func (c *Config) defaults() error {
	if c.Store == nil || c.Dial == nil {
		return errors.New("fleet: Config needs Store and Dial")
	}
	if c.LostAfter <= 0 {
		c.LostAfter = DefaultLostAfter
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = c.LostAfter / 5
	}
	if c.CPUOvercommit <= 0 {
		c.CPUOvercommit = 1
	}
	if c.MemoryOvercommit <= 0 {
		c.MemoryOvercommit = 1
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Heartbeat >= c.LostAfter {
		return fmt.Errorf("fleet: heartbeat interval %s must be below lost-after %s", c.Heartbeat, c.LostAfter)
	}
	return nil
}

// member is a node as the fleet keeps it in memory.
type member struct {
	row store.Node
	// client is nil until the node registers with this process.
	client    NodeClient
	capacity  fleetwire.Capacity
	templates map[string]bool
	lastSeen  time.Time
	reserved  api.Resources
}

func (m *member) connected() bool {
	return m.client != nil && (m.row.State == api.NodeReady || m.row.State == api.NodeDraining)
}

// Fleet is the registry and the router.
type Fleet struct {
	cfg   Config
	store store.Fleet
	log   *slog.Logger

	mu sync.Mutex
	// sandboxes is set once by SetSandboxes, before Run.
	sandboxes Sandboxes
	// started is when Load ran: nodes that have not registered again are
	// waited for until started + LostAfter.
	started time.Time
	nodes   map[string]*member
	placed  map[string]*store.Placement // by sandbox ID
	// changed is closed and replaced at every change of membership.
	changed chan struct{}
	// pending are the registrations whose sandboxes Run reattaches; kick
	// tells Run there are some.
	pending []reattachJob
	kick    chan struct{}
}

// New returns a fleet; Load reads its state before any other call.
func New(cfg Config) (*Fleet, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Fleet{
		cfg: cfg, store: cfg.Store, log: cfg.Log,
		nodes: map[string]*member{}, placed: map[string]*store.Placement{},
		changed: make(chan struct{}), kick: make(chan struct{}, 1),
	}, nil
}

// SetSandboxes connects the fleet to the core; call it before Run.
func (f *Fleet) SetSandboxes(s Sandboxes) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes = s
}

// Load reads the nodes and placements, once, before any other call:
// every node that was ready or draining counts as seen now, so it has
// LostAfter to register again.
func (f *Fleet) Load(ctx context.Context) error {
	nodes, err := f.store.ListNodes(ctx)
	if err != nil {
		return err
	}
	ps, err := f.store.ListPlacements(ctx, "")
	if err != nil {
		return err
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = now
	for _, n := range nodes {
		f.nodes[n.ID] = &member{row: n, lastSeen: now, capacity: fleetwire.Capacity{
			CPUs: n.Capacity.CPUs, MemoryMiB: n.Capacity.MemoryMiB, DiskMiB: n.Capacity.DiskMiB,
		}}
	}
	for _, p := range ps {
		f.placed[p.SandboxID] = &p
		if m := f.nodes[p.NodeID]; m != nil && p.NodeID != "" {
			m.reserved = add(m.reserved, p.Resources, 1)
		}
	}
	return nil
}

func (f *Fleet) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

func add(a, b api.Resources, sign float64) api.Resources {
	return api.Resources{
		CPUs:      a.CPUs + sign*b.CPUs,
		MemoryMiB: a.MemoryMiB + int64(sign)*b.MemoryMiB,
		DiskMiB:   a.DiskMiB + int64(sign)*b.DiskMiB,
	}
}

// lostError is the answer of a call for a sandbox whose node is lost,
// removed, or did not register again in time after a restart. The core
// recognises it by its NodeLost method and leaves the sandbox to the loss
// path.
type lostError struct{ err *api.Error }

func (e lostError) Error() string  { return e.err.Error() }
func (e lostError) Unwrap() error  { return e.err }
func (e lostError) NodeLost() bool { return true }

func errLost(name string) error {
	return lostError{api.Errorf(api.CodeUnavailable, "node %s is not connected", name)}
}
