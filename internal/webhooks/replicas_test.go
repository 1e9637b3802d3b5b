package webhooks

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
)

// TestTwoDispatchersSendOnce: two dispatchers over one outbox, as on two
// replicas that both lead for a moment, send each delivery once: each
// claims a delivery before it sends it, and the other finds it taken.
func TestTwoDispatchersSendOnce(t *testing.T) {
	h := start(t, testConfig())
	second, err := New(testConfig(), h.st, nil, h.obs, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() { second.Run(ctx) })
	defer func() {
		cancel()
		wg.Wait()
	}()

	var mu sync.Mutex
	got := map[string]int{} // posts by delivery ID
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get("webhook-id")]++
		mu.Unlock()
	}))
	defer srv.Close()
	const n = 40
	wh := h.hook(t, srv.URL, "*")
	for range n {
		h.event(t, "sandbox.running")
	}
	for _, d := range h.settled(t, wh.ID, n) {
		if d.State != api.DeliveryDelivered || d.AttemptCount != 1 {
			t.Errorf("delivery %s: %s after %d attempts; want delivered after 1", d.ID, d.State, d.AttemptCount)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		t.Errorf("the receiver got %d deliveries; want %d", len(got), n)
	}
	for id, c := range got {
		if c != 1 {
			t.Errorf("delivery %s was sent %d times", id, c)
		}
	}
}
