// Package fleet is the control plane's view of its nodes (`cove control`):
// the registry the join service admits nodes through (epochs, heartbeats,
// loss, drain, removal) and the placement router, the one lifecycle.Node
// of the core, which places each sandbox on a node with room and sends
// every later call for it to that node through a per-node client.
//
// The store is the registry's truth, shared by every control replica: a
// node registers and heartbeats through whichever replica it reaches, and
// each replica keeps a view of the nodes read from the store (Run
// refreshes it every second, Poke at once), dials every ready node itself
// and reads a sandbox's placement from the store before each call, so any
// replica forwards calls for any sandbox. Placement picks a node from the
// view and asks the store to admit it (store.Fleet.AdmitPlacement), which
// checks the node's room and places in one atomic step: two replicas
// placing at once never put a node over its capacity; a refused node is
// passed over for the next. Loss detection reads the heartbeats of the
// store and runs on one replica (RunLossDetection, under the leader's
// lease).
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
	"slices"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
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
	node.Watches
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
	// Refresh is how often Run reads the nodes and placements from the
	// store again, to see what other replicas changed. Default 1 second.
	Refresh time.Duration
	// Changed, when set, is told after this replica changed the fleet's
	// membership (a registration, a drain, a loss), so that the other
	// replicas can refresh at once (PostgreSQL's NOTIFY); they poll
	// anyway.
	Changed func(ctx context.Context)
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
	if c.Refresh <= 0 {
		c.Refresh = time.Second
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

// member is a node as this replica sees it.
type member struct {
	row store.Node
	// client is the node's client while it is ready or draining, dialled
	// for dialed (its epoch and address then); nil otherwise.
	client    NodeClient
	dialed    dialKey
	templates map[string]bool
	// beatAt is when the node last registered or heartbeat through this
	// replica (zero if never).
	beatAt time.Time
	// reserved is what the placements on the node reserve, as last read
	// or placed here: a hint for choosing a node; the store's
	// AdmitPlacement has the last word.
	reserved api.Resources
}

// dialKey is what a node's client was dialled for: a registration again
// (a new epoch) or a new address makes a new client.
type dialKey struct {
	epoch int64
	addr  string
}

func (m *member) connected() bool {
	return m.client != nil && (m.row.State == api.NodeReady || m.row.State == api.NodeDraining)
}

// Fleet is the registry and the router.
type Fleet struct {
	cfg   Config
	store store.Fleet
	log   *slog.Logger

	// poke asks Run to refresh the view now.
	poke chan struct{}

	mu sync.Mutex
	// sandboxes is set once by SetSandboxes, before Run.
	sandboxes Sandboxes
	// started is when Load ran: calls for a node not heard of since
	// wait for it until started + LostAfter.
	started time.Time
	nodes   map[string]*member
	// placed caches the placements as last read (by sandbox ID); a call
	// for a sandbox reads its placement from the store.
	placed map[string]*store.Placement
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
		changed: make(chan struct{}), kick: make(chan struct{}, 1), poke: make(chan struct{}, 1),
	}, nil
}

// SetSandboxes connects the fleet to the core; call it before Run.
func (f *Fleet) SetSandboxes(s Sandboxes) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes = s
}

// Load reads the nodes and placements, once, before any other call, and
// dials every node that is ready or draining.
func (f *Fleet) Load(ctx context.Context) error {
	f.mu.Lock()
	f.started = time.Now()
	f.mu.Unlock()
	return f.Refresh(ctx)
}

// Refresh reads the nodes and placements from the store again: what
// other replicas registered, drained, removed, lost or placed. A node
// ready or draining is dialled (again, when it registered again or
// moved); any other's client is closed.
func (f *Fleet) Refresh(ctx context.Context) error {
	nodes, err := f.store.ListNodes(ctx)
	if err != nil {
		return err
	}
	ps, err := f.store.ListPlacements(ctx, "")
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	changed := false
	for _, n := range nodes {
		m := f.nodes[n.ID]
		if m == nil {
			m = &member{}
			f.nodes[n.ID] = m
			changed = true
		}
		if n.Epoch < m.row.Epoch {
			// Read before a registration this replica made since.
			continue
		}
		if m.row.State != n.State || m.row.Epoch != n.Epoch || !slices.Equal(m.row.Templates, n.Templates) ||
			f.heard(n) != f.heard(m.row) {
			changed = true
		}
		m.row, m.templates = n, setOf(n.Templates)
		f.dialLocked(m)
	}
	placed := make(map[string]*store.Placement, len(ps))
	reserved := map[string]api.Resources{}
	for _, p := range ps {
		placed[p.SandboxID] = &p
		if p.NodeID != "" {
			reserved[p.NodeID] = add(reserved[p.NodeID], p.Resources, 1)
		}
	}
	f.placed = placed
	for id, m := range f.nodes {
		m.reserved = reserved[id]
	}
	if changed {
		f.notifyLocked()
	}
	return nil
}

// Poke asks Run to refresh the view now (another replica changed the
// fleet).
func (f *Fleet) Poke() {
	select {
	case f.poke <- struct{}{}:
	default:
	}
}

// dialLocked gives a ready or draining node a client for its epoch and
// address, and closes any other node's. The caller holds f.mu.
func (f *Fleet) dialLocked(m *member) {
	live := m.row.State == api.NodeReady || m.row.State == api.NodeDraining
	want := dialKey{m.row.Epoch, m.row.Addr}
	if live && m.client != nil && m.dialed == want {
		return
	}
	closeClient(m)
	if !live || m.row.Addr == "" {
		return
	}
	c, err := f.cfg.Dial(m.row.ID, m.row.Addr)
	if err != nil {
		f.log.Error("dial a node", "node", m.row.ID, "addr", m.row.Addr, "err", err)
		return
	}
	m.client, m.dialed = c, want
}

// announce tells the other replicas that this one changed the fleet.
func (f *Fleet) announce(ctx context.Context) {
	if f.cfg.Changed != nil {
		f.cfg.Changed(ctx)
	}
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
