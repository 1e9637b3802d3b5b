// Package observations keeps what sandboxes do on the network: the node
// counts each sandbox's connections per destination and hands the counts
// over; the service adds them to the store every Flush, in one
// transaction however many connections they sum up, so a sandbox
// opening connections as fast as it can costs the database one write per
// interval. A read adds what the node and the service hold but have not
// stored yet, under mu, so that nothing is counted twice or missed while
// a flush moves it. Observations expire with the sandbox's other history
// (Retention).
package observations

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// maxUnsaved bounds the reports kept in memory while the store refuses
// them; past it they are dropped (and logged).
const maxUnsaved = 1 << 16

// Config is the observations' part of the control plane's configuration.
type Config struct {
	// Flush is how often the node's reports are stored (ObservationFlush).
	Flush time.Duration
	// Max bounds the rows kept per sandbox (MaxObservations).
	Max int
	// Retention is how long a row last seen is kept (EventRetention).
	Retention time.Duration
}

// Store is the part of the store the service reads and writes.
type Store interface {
	GetSandbox(ctx context.Context, teamID, id string) (api.Sandbox, error)
	GetCommand(ctx context.Context, sandboxID, id string) (api.Command, error)
	AddObservations(ctx context.Context, reports []store.Observation, maxPerSandbox int) error
	ListObservations(ctx context.Context, sandboxID string) ([]api.NetworkObservation, error)
	DeleteObservationsBefore(ctx context.Context, t time.Time) (int64, error)
}

var _ Store = store.Store(nil)

// Node is the part of the node that counts network use.
type Node interface {
	// DrainObservations hands over what the node counted since the last
	// call.
	DrainObservations() []node.Observation
	// PendingObservations is what the node counted of a sandbox and has
	// not handed over yet.
	PendingObservations(id string) []api.NetworkObservation
}

// Sandboxes finds a team's sandbox by ID or name (the core's lookup, with
// its tenancy).
type Sandboxes interface {
	Sandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error)
}

// Service stores and answers network observations.
type Service struct {
	cfg   Config
	store Store
	node  Node
	sbs   Sandboxes
	log   *slog.Logger
	now   func() time.Time

	mu      sync.RWMutex // a flush holds it; reads share it
	unsaved []node.Observation

	// known caches the sandboxes and commands already checked, so that a
	// flush asks the store about each once.
	knownMu  sync.Mutex
	sandbox  map[string]bool
	commands map[string]bool // sandbox/command
}

// New returns the service over st and nd. now is the clock.
func New(cfg Config, st Store, nd Node, sbs Sandboxes, now func() time.Time, log *slog.Logger) *Service {
	return &Service{cfg: cfg, store: st, node: nd, sbs: sbs, now: now, log: log,
		sandbox: map[string]bool{}, commands: map[string]bool{}}
}

// Run stores the node's reports every Flush until ctx ends, then once
// more.
func (s *Service) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Flush)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.Flush(ctx)
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			s.Flush(fctx)
			cancel()
			return
		}
	}
}

// Flush adds the node's reports to the store. Reports of sandboxes the
// store does not hold (the warm pool's, before one is handed out) are
// dropped; a command the store does not know as the sandbox's is not
// named. Reports the store refuses are kept for the next flush.
func (s *Service) Flush(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reports := append(s.unsaved, s.node.DrainObservations()...)
	s.unsaved = nil
	if len(reports) == 0 {
		return
	}
	batch := make([]store.Observation, 0, len(reports))
	for _, r := range reports {
		ok, err := s.sandboxKnown(ctx, r.SandboxID)
		if err != nil {
			s.keepUnsaved(reports, err)
			return
		}
		if !ok {
			continue
		}
		r.LastCommandID = s.CheckCommand(ctx, r.SandboxID, r.LastCommandID)
		batch = append(batch, store.Observation{SandboxID: r.SandboxID, NetworkObservation: r.NetworkObservation})
	}
	if err := s.store.AddObservations(ctx, batch, s.cfg.Max); err != nil {
		s.keepUnsaved(reports, err)
	}
}

func (s *Service) keepUnsaved(reports []node.Observation, err error) {
	if len(reports) > maxUnsaved {
		s.log.Error("store network observations; dropping them", "reports", len(reports), "err", err)
		return
	}
	s.log.Warn("store network observations; trying again", "reports", len(reports), "err", err)
	s.unsaved = reports
}

// sandboxKnown reports whether the store holds the sandbox.
func (s *Service) sandboxKnown(ctx context.Context, id string) (bool, error) {
	s.knownMu.Lock()
	ok := s.sandbox[id]
	s.knownMu.Unlock()
	if ok {
		return true, nil
	}
	_, err := s.store.GetSandbox(ctx, "", id)
	switch {
	case api.ErrorCode(err) == api.CodeNotFound:
		return false, nil
	case err != nil:
		return false, err
	}
	s.knownMu.Lock()
	if len(s.sandbox) > 1<<14 {
		clear(s.sandbox)
	}
	s.sandbox[id] = true
	s.knownMu.Unlock()
	return true, nil
}

// CheckCommand returns cmd if it is a command of the sandbox, else "". The
// name comes from the sandbox's agent, which the sandbox's root controls:
// it may name a command of its own sandbox, never another's.
func (s *Service) CheckCommand(ctx context.Context, sandboxID, cmd string) string {
	if cmd == "" {
		return ""
	}
	key := sandboxID + "/" + cmd
	s.knownMu.Lock()
	ok := s.commands[key]
	s.knownMu.Unlock()
	if ok {
		return cmd
	}
	if _, err := s.store.GetCommand(ctx, sandboxID, cmd); err != nil {
		if api.ErrorCode(err) == api.CodeNotFound {
			s.log.Warn("a sandbox's agent named a command the sandbox does not have", "sandbox", sandboxID, "command", cmd)
		}
		return ""
	}
	s.knownMu.Lock()
	if len(s.commands) > 1<<14 {
		clear(s.commands)
	}
	s.commands[key] = true
	s.knownMu.Unlock()
	return cmd
}

// Network returns a sandbox's policy and what it tried to reach.
func (s *Service) Network(ctx context.Context, teamID, ref string) (api.NetworkView, error) {
	sb, err := s.sbs.Sandbox(ctx, teamID, ref)
	if err != nil {
		return api.NetworkView{}, err
	}
	obs, err := s.Sandbox(ctx, sb.ID)
	if err != nil {
		return api.NetworkView{}, err
	}
	return api.NetworkView{Policy: sb.Network, Observations: obs}, nil
}

// Sandbox returns a sandbox's stored observations with what is not
// stored yet added. The caller has checked the sandbox is the team's.
func (s *Service) Sandbox(ctx context.Context, id string) ([]api.NetworkObservation, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	rows, err := s.store.ListObservations(ctx, id)
	if err != nil {
		return nil, err
	}
	var add []api.NetworkObservation
	for _, r := range s.unsaved {
		if r.SandboxID == id {
			add = append(add, r.NetworkObservation)
		}
	}
	add = append(add, s.node.PendingObservations(id)...)
	for i := range add {
		add[i].LastCommandID = s.CheckCommand(ctx, id, add[i].LastCommandID)
	}
	return merge(rows, add, s.cfg.Max), nil
}

// merge adds reports to rows as the store would (bounded the same way),
// sorted by destination, port and decision.
func merge(rows, add []api.NetworkObservation, maxRows int) []api.NetworkObservation {
	type key struct {
		dest             string
		port             int
		decision, reason string
	}
	idx := make(map[key]int, len(rows))
	for i, o := range rows {
		idx[key{o.Destination, o.Port, o.Decision, o.Reason}] = i
	}
	counted := len(rows)
	for _, a := range add {
		k := key{a.Destination, a.Port, a.Decision, a.Reason}
		i, ok := idx[k]
		if !ok && counted >= maxRows {
			a.Destination, a.Port = "other", 0
			k = key{a.Destination, a.Port, a.Decision, a.Reason}
			i, ok = idx[k]
		} else if !ok {
			counted++
		}
		if !ok {
			idx[k] = len(rows)
			rows = append(rows, a)
			continue
		}
		o := &rows[i]
		o.Count += a.Count
		o.BytesOut += a.BytesOut
		o.BytesIn += a.BytesIn
		o.Injected += a.Injected
		if a.LastStatus != 0 {
			o.LastStatus = a.LastStatus
		}
		if a.FirstSeen.Before(o.FirstSeen) {
			o.FirstSeen = a.FirstSeen
		}
		if a.LastSeen.After(o.LastSeen) {
			o.LastSeen = a.LastSeen
		}
		if a.LastCommandID != "" {
			o.LastCommandID = a.LastCommandID
		}
	}
	slices.SortFunc(rows, func(a, b api.NetworkObservation) int {
		return cmp.Or(cmp.Compare(a.Destination, b.Destination), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Decision, b.Decision), cmp.Compare(a.Reason, b.Reason))
	})
	if rows == nil {
		rows = []api.NetworkObservation{}
	}
	return rows
}

// Expire drops observations last seen longer ago than Retention: they go
// with the sandbox's other history.
func (s *Service) Expire(ctx context.Context) {
	n, err := s.store.DeleteObservationsBefore(ctx, s.now().Add(-s.cfg.Retention))
	if err != nil {
		s.log.Warn("expire network observations", "err", err)
		return
	}
	if n > 0 {
		s.log.Info("network observations expired", "count", n, "retention", s.cfg.Retention.String())
	}
}
