package server

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// Network observations: the node counts what each sandbox does on the
// network and hands the counts over; the server adds them to the store
// every ObservationFlush, in one transaction however many connections
// they sum up, so a sandbox opening connections as fast as it can costs
// the database one write per interval. A read adds what the node and the
// server hold but have not stored yet, under obsMu, so that nothing is
// counted twice or missed while a flush moves it.

// maxUnsaved bounds the reports kept in memory while the store refuses
// them; past it they are dropped (and logged).
const maxUnsaved = 1 << 16

// observations holds the server's side of network observations.
type observations struct {
	mu      sync.RWMutex // a flush holds it; reads share it
	unsaved []node.Observation

	// known caches the sandboxes and commands already checked, so that a
	// flush asks the store about each once.
	knownMu  sync.Mutex
	sandbox  map[string]bool
	commands map[string]bool // sandbox/command
}

// runObservations stores the node's reports every ObservationFlush until
// the server closes, then once more.
func (s *Server) runObservations() {
	t := time.NewTicker(s.cfg.ObservationFlush)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.flushObservations(s.ctx)
		case <-s.ctx.Done():
			ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
			s.flushObservations(ctx)
			cancel()
			return
		}
	}
}

// flushObservations adds the node's reports to the store. Reports of
// sandboxes the store does not hold (the warm pool's, before one is handed
// out) are dropped; a command the store does not know as the sandbox's
// is not named. Reports the store refuses are kept for the next flush.
func (s *Server) flushObservations(ctx context.Context) {
	s.obs.mu.Lock()
	defer s.obs.mu.Unlock()
	reports := append(s.obs.unsaved, s.node.DrainObservations()...)
	s.obs.unsaved = nil
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
		r.LastCommandID = s.checkCommand(ctx, r.SandboxID, r.LastCommandID)
		batch = append(batch, store.Observation{SandboxID: r.SandboxID, NetworkObservation: r.NetworkObservation})
	}
	if err := s.store.AddObservations(ctx, batch, s.cfg.MaxObservations); err != nil {
		s.keepUnsaved(reports, err)
	}
}

func (s *Server) keepUnsaved(reports []node.Observation, err error) {
	if len(reports) > maxUnsaved {
		s.log.Error("store network observations; dropping them", "reports", len(reports), "err", err)
		return
	}
	s.log.Warn("store network observations; trying again", "reports", len(reports), "err", err)
	s.obs.unsaved = reports
}

// sandboxKnown reports whether the store holds the sandbox.
func (s *Server) sandboxKnown(ctx context.Context, id string) (bool, error) {
	s.obs.knownMu.Lock()
	ok := s.obs.sandbox[id]
	s.obs.knownMu.Unlock()
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
	s.obs.knownMu.Lock()
	if len(s.obs.sandbox) > 1<<14 {
		clear(s.obs.sandbox)
	}
	s.obs.sandbox[id] = true
	s.obs.knownMu.Unlock()
	return true, nil
}

// checkCommand returns cmd if it is a command of the sandbox, else "". The
// name comes from the sandbox's agent, which the sandbox's root controls:
// it may name a command of its own sandbox, never another's.
func (s *Server) checkCommand(ctx context.Context, sandboxID, cmd string) string {
	if cmd == "" {
		return ""
	}
	key := sandboxID + "/" + cmd
	s.obs.knownMu.Lock()
	ok := s.obs.commands[key]
	s.obs.knownMu.Unlock()
	if ok {
		return cmd
	}
	if _, err := s.store.GetCommand(ctx, sandboxID, cmd); err != nil {
		if api.ErrorCode(err) == api.CodeNotFound {
			s.log.Warn("a sandbox's agent named a command the sandbox does not have", "sandbox", sandboxID, "command", cmd)
		}
		return ""
	}
	s.obs.knownMu.Lock()
	if len(s.obs.commands) > 1<<14 {
		clear(s.obs.commands)
	}
	s.obs.commands[key] = true
	s.obs.knownMu.Unlock()
	return cmd
}

// sandboxObservations are a sandbox's stored observations with what is
// not stored yet added.
func (s *Server) sandboxObservations(ctx context.Context, id string) ([]api.NetworkObservation, error) {
	s.obs.mu.RLock()
	defer s.obs.mu.RUnlock()
	rows, err := s.store.ListObservations(ctx, id)
	if err != nil {
		return nil, err
	}
	var add []api.NetworkObservation
	for _, r := range s.obs.unsaved {
		if r.SandboxID == id {
			add = append(add, r.NetworkObservation)
		}
	}
	add = append(add, s.node.PendingObservations(id)...)
	for i := range add {
		add[i].LastCommandID = s.checkCommand(ctx, id, add[i].LastCommandID)
	}
	return mergeObservations(rows, add, s.cfg.MaxObservations), nil
}

// mergeObservations adds reports to rows as the store would (bounded the
// same way), sorted by destination, port and decision.
func mergeObservations(rows, add []api.NetworkObservation, maxRows int) []api.NetworkObservation {
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

// expireObservations drops observations last seen longer ago than the
// event retention: they go with the sandbox's other history.
func (s *Server) expireObservations(ctx context.Context) {
	n, err := s.store.DeleteObservationsBefore(ctx, s.now().Add(-s.cfg.EventRetention))
	if err != nil {
		s.log.Warn("expire network observations", "err", err)
		return
	}
	if n > 0 {
		s.log.Info("network observations expired", "count", n, "retention", s.cfg.EventRetention.String())
	}
}
