package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/cove-dev/cove/api"
)

type fakeReplica struct{ leader atomic.Bool }

func (r *fakeReplica) ReplicaID() string { return "rep_test" }
func (r *fakeReplica) Leader() bool      { return r.leader.Load() }

// TestReplicaAndNodeMetrics: a scrape, parsed by Prometheus's parser,
// says whether the replica leads (as it changes), what it has in flight,
// and each node's capacity, reservations and sandboxes; removed nodes are
// left out, and a node list that fails makes the scrape fail, not lie.
func TestReplicaAndNodeMetrics(t *testing.T) {
	m := New(nil, slog.New(slog.DiscardHandler))
	r := &fakeReplica{}
	m.ObserveReplica(r)
	var listErr atomic.Pointer[error]
	m.ObserveNodes(func(ctx context.Context) ([]api.Node, error) {
		if err := listErr.Load(); err != nil {
			return nil, *err
		}
		return []api.Node{
			{Name: "alpha", State: api.NodeReady, Capacity: api.NodeCapacity{CPUs: 8, MemoryMiB: 16384, DiskMiB: 100000},
				Reserved: api.Resources{CPUs: 2.5, MemoryMiB: 1024, DiskMiB: 2048}, Sandboxes: 3},
			{Name: "gone", State: api.NodeRemoved, Capacity: api.NodeCapacity{CPUs: 4}},
		}, nil
	})

	fams := scrape(t, m)
	if got := value(fams, "cove_replica_leader", map[string]string{"replica": "rep_test"}); got != 0 {
		t.Errorf("leader before leading = %v; want 0", got)
	}
	r.leader.Store(true)
	fams = scrape(t, m)
	if got := value(fams, "cove_replica_leader", map[string]string{"replica": "rep_test"}); got != 1 {
		t.Errorf("leader while leading = %v; want 1", got)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cove_node_capacity", map[string]string{"node": "alpha", "resource": "cpus"}, 8},
		{"cove_node_capacity", map[string]string{"node": "alpha", "resource": "memory_mib"}, 16384},
		{"cove_node_reserved", map[string]string{"node": "alpha", "resource": "cpus"}, 2.5},
		{"cove_node_reserved", map[string]string{"node": "alpha", "resource": "disk_mib"}, 2048},
		{"cove_node_sandboxes", map[string]string{"node": "alpha"}, 3},
		{"cove_node_capacity", map[string]string{"node": "gone"}, -1},
		{"cove_store_ops_in_flight", nil, 0},
	} {
		if got := value(fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v; want %v", c.name, c.labels, got, c.want)
		}
	}

	// A request in flight is counted while it is served.
	var during float64
	h := m.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		during = value(scrape(t, m), "cove_api_requests_in_flight", nil)
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/sandboxes", nil))
	if during != 1 {
		t.Errorf("requests in flight during a request = %v; want 1", during)
	}
	if got := value(scrape(t, m), "cove_api_requests_in_flight", nil); got != 0 {
		t.Errorf("requests in flight after it = %v; want 0", got)
	}

	err := errors.New("store down")
	listErr.Store(&err)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code == http.StatusOK {
		t.Errorf("a scrape whose node list failed answered %d; want an error", rec.Code)
	}
}
