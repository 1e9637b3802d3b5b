package webhooks

import (
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestServeIsItsOwnLeader: `cove serve` is one replica of the control
// plane: GET /healthz says it reaches its store and, once it has taken the
// leader lease, that it leads; the metrics say the same of it.
func TestServeIsItsOwnLeader(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--metrics-listen", "127.0.0.1:0", "--warm-pool", "0"))
	deadline := time.Now().Add(30 * time.Second)
	for {
		h, err := s.Admin.Health(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if h.Store != "ok" {
			t.Fatalf("store = %q; want ok", h.Store)
		}
		if h.Leader {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the only replica never leads")
		}
		time.Sleep(50 * time.Millisecond)
	}
	fams := scrape(t, "http://"+s.Listeners()["metrics"]+"/metrics", "")
	f := fams["cove_replica_leader"]
	if f == nil || len(f.Metric) != 1 || f.Metric[0].GetGauge().GetValue() != 1 {
		t.Fatalf("cove_replica_leader = %v; want one replica at 1", f)
	}
	if l := f.Metric[0].GetLabel(); len(l) != 1 || l[0].GetName() != "replica" || len(l[0].GetValue()) < 5 || l[0].GetValue()[:4] != "rep_" {
		t.Errorf("cove_replica_leader's labels = %v; want replica=rep_…", l)
	}
	if fams["cove_store_ops_in_flight"] == nil || fams["cove_api_requests_in_flight"] == nil {
		t.Error("the replica's in-flight gauges are missing")
	}
}
