package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"

	cove "github.com/cove-dev/cove/sdk/go"
)

// fakeReplica is a replica whose store answers or fails, or hangs until
// the check gives up, on the test's word.
type fakeReplica struct {
	mu     sync.Mutex
	err    error
	hang   bool
	leader bool
}

func (r *fakeReplica) StoreHealth(ctx context.Context) error {
	r.mu.Lock()
	err, hang := r.err, r.hang
	r.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

func (r *fakeReplica) Leader() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leader
}

func (r *fakeReplica) set(err error, hang, leader bool) {
	r.mu.Lock()
	r.err, r.hang, r.leader = err, hang, leader
	r.mu.Unlock()
}

// TestHealthzReplica: GET /healthz says whether this replica reaches its
// store and leads, and stays 200 "ok" when the store fails or hangs.
func TestHealthzReplica(t *testing.T) {
	r := &fakeReplica{}
	h := newHandler(newFake(), slog.New(slog.DiscardHandler))
	h.Replica = r
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := cove.New(srv.URL, "")
	tests := []struct {
		name      string
		err       error
		hang      bool
		leader    bool
		wantStore string
	}{
		{"leader", nil, false, true, "ok"},
		{"follower", nil, false, false, "ok"},
		{"store down", errors.New("dial tcp 127.0.0.1:5432: connection refused"), false, true, "dial tcp 127.0.0.1:5432: connection refused"},
		{"store hangs", nil, true, false, context.DeadlineExceeded.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.set(tt.err, tt.hang, tt.leader)
			got, err := c.Health(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != "ok" || got.Store != tt.wantStore || got.Leader != tt.leader {
				t.Errorf("health = status %q, store %q, leader %v; want ok, %q, %v", got.Status, got.Store, got.Leader, tt.wantStore, tt.leader)
			}
		})
	}
}
