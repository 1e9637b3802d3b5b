// Package jointest holds in-memory fakes of the node listener's store and
// registry, and a helper that serves a join.Service over real TLS on
// loopback, for the tests of join and of the node's membership.
package jointest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/fleet/join"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/fleet/pki"
	"github.com/cove-dev/cove/internal/secrets"
)

// Store is an in-memory join.Store.
type Store struct {
	mu     sync.Mutex
	values map[string]string
}

var (
	_ join.Store   = (*Store)(nil)
	_ join.Creator = (*Store)(nil)
)

// NewStore returns an empty store.
func NewStore() *Store { return &Store{values: map[string]string{}} }

// FleetValue returns a value, not_found when missing.
func (s *Store) FleetValue(_ context.Context, name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[name]
	if !ok {
		return "", api.Errorf(api.CodeNotFound, "no fleet value %s", name)
	}
	return v, nil
}

// PutFleetValue sets a value.
func (s *Store) PutFleetValue(_ context.Context, name, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[name] = value
	return nil
}

// CreateFleetValue sets a value that is not there yet, conflict
// otherwise.
func (s *Store) CreateFleetValue(_ context.Context, name, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.values[name]; ok {
		return api.Errorf(api.CodeConflict, "fleet value %s exists", name)
	}
	s.values[name] = value
	return nil
}

// Values is a copy of every value stored.
func (s *Store) Values() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.values))
	for k, v := range s.values {
		out[k] = v
	}
	return out
}

// Node is what the fake registry knows of a node.
type Node struct {
	ID, Name string
	// JoinHash is the hash of the nonce it joined with.
	JoinHash   string
	Joins      int
	Epoch      int64
	Lost       bool
	Removed    bool
	Heartbeats int
	Last       fleetwire.Heartbeat
	Assigned   []string
}

// Registry is an in-memory join.Registry: IDs n1, n2, …; a name is
// refused while its node is neither lost nor removed, unless the join
// brings the nonce hash the node joined with.
type Registry struct {
	mu     sync.Mutex
	nodes  map[string]*Node
	epochs int64
}

var _ join.Registry = (*Registry)(nil)

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{nodes: map[string]*Node{}} }

// Join admits a node by name.
func (r *Registry) Join(ctx context.Context, joinHash string, reg fleetwire.Registration) (fleetwire.Admission, error) {
	return r.register(ctx, "", joinHash, reg)
}

// Register admits a node: by name for nodeID "", as Join without a
// nonce.
func (r *Registry) Register(ctx context.Context, nodeID string, reg fleetwire.Registration) (fleetwire.Admission, error) {
	return r.register(ctx, nodeID, "", reg)
}

func (r *Registry) register(_ context.Context, nodeID, joinHash string, reg fleetwire.Registration) (fleetwire.Admission, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n *Node
	if nodeID == "" {
		for _, o := range r.nodes {
			if o.Name == reg.Name && !o.Removed && joinHash != "" && pki.SameHash(o.JoinHash, joinHash) {
				n = o
			}
		}
		for _, o := range r.nodes {
			if n == nil && o.Name == reg.Name && !o.Lost && !o.Removed {
				return fleetwire.Admission{}, api.Errorf(api.CodeConflict, "a node named %s is registered and alive", reg.Name)
			}
		}
		if n == nil {
			n = &Node{ID: fmt.Sprintf("n%d", len(r.nodes)+1), Name: reg.Name, JoinHash: joinHash}
			r.nodes[n.ID] = n
		}
		n.Joins++
	} else {
		n = r.nodes[nodeID]
		if n == nil {
			return fleetwire.Admission{}, api.Errorf(api.CodeNotFound, "no node %s", nodeID)
		}
		if n.Removed {
			return fleetwire.Admission{}, api.Errorf(api.CodePermissionDenied, "node %s was removed", nodeID)
		}
	}
	r.epochs++
	n.Epoch, n.Lost = r.epochs, false
	return fleetwire.Admission{NodeID: n.ID, Epoch: n.Epoch, Assigned: slices.Clone(n.Assigned)}, nil
}

// Heartbeat records a heartbeat.
func (r *Registry) Heartbeat(_ context.Context, nodeID string, hb fleetwire.Heartbeat) (fleetwire.HeartbeatAnswer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.nodes[nodeID]
	switch {
	case n == nil:
		return fleetwire.HeartbeatAnswer{}, api.Errorf(api.CodeNotFound, "no node %s", nodeID)
	case n.Removed:
		return fleetwire.HeartbeatAnswer{}, api.Errorf(api.CodePermissionDenied, "node %s was removed", nodeID)
	case n.Lost:
		return fleetwire.HeartbeatAnswer{}, api.Errorf(api.CodeConflict, "node %s was declared lost; register again", nodeID)
	case hb.Epoch != n.Epoch:
		return fleetwire.HeartbeatAnswer{}, api.Errorf(api.CodeConflict, "epoch %d is stale; register again", hb.Epoch)
	}
	n.Heartbeats++
	n.Last = hb
	n.JoinHash = "" // heard with its certificate: its nonce is spent
	return fleetwire.HeartbeatAnswer{Epoch: n.Epoch}, nil
}

// Allowed refuses a removed node.
func (r *Registry) Allowed(_ context.Context, nodeID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.nodes[nodeID]
	switch {
	case n == nil:
		return api.Errorf(api.CodeNotFound, "no node %s", nodeID)
	case n.Removed:
		return api.Errorf(api.CodePermissionDenied, "node %s was removed", nodeID)
	}
	return nil
}

// Node is a copy of a node's record.
func (r *Registry) Node(id string) (Node, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.nodes[id]
	if !ok {
		return Node{}, false
	}
	return *n, true
}

// Update changes a node's record (remove it, declare it lost, assign).
func (r *Registry) Update(id string, f func(*Node)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.nodes[id]; n != nil {
		f(n)
	}
}

// Keyring is a keyring with a new random key.
func Keyring(t testing.TB) *secrets.Keyring {
	t.Helper()
	return secrets.NewKeyring(Key(t))
}

// Key is a new random secrets key.
func Key(t testing.TB) *secrets.Key {
	t.Helper()
	raw, err := secrets.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := secrets.ParseKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Serve serves the service's handler with its listener TLS on a free
// loopback port, closed at the end of the test; it returns the https://
// address.
func Serve(t testing.TB, s *join.Service) string {
	t.Helper()
	url, _ := ServeService(t, s)
	return url
}

// ServeService runs the service's Serve on a free loopback port until the
// end of the test, or until stop; it returns the https:// address.
func ServeService(t testing.TB, s *join.Service) (url string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return "https://" + ln.Addr().String(), stop
}

// ServeTLS serves h with cfg on a free loopback port until the end of the
// test, or until stop; it returns the https:// address.
func ServeTLS(t testing.TB, h http.Handler, cfg *tls.Config) (url string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: cfg, ErrorLog: log.New(io.Discard, "", 0)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.ServeTLS(ln, "", "") // ends with ErrServerClosed
	}()
	stop = func() {
		_ = srv.Close()
		<-done
	}
	t.Cleanup(stop)
	return "https://" + ln.Addr().String(), stop
}
