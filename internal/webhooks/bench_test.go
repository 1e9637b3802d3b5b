package webhooks

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// BenchmarkDeliver measures deliveries through the real SQLite outbox to
// loopback receivers: b.N events, each to 8 webhooks (so up to 8 attempts
// in flight), reported as deliveries per second.
func BenchmarkDeliver(b *testing.B) {
	h := start(b, testConfig())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	const hooks = 8
	var ids []string
	for i := range hooks {
		w := store.Webhook{Webhook: api.Webhook{ID: fmt.Sprintf("whk_%d", i), TeamID: h.team, URL: srv.URL, Events: []string{"*"}, CreatedAt: time.Now()},
			Secret: NewSecret()}
		h.create(b, w)
		ids = append(ids, w.ID)
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, err := h.st.AppendEvent(b.Context(), h.team, api.Event{Type: "sandbox.running", SandboxID: "sbx_1", Time: time.Now().UTC()}); err != nil {
			b.Fatal(err)
		}
	}
	// Each webhook's deliveries go in order: the newest delivered means
	// all were (the receiver always answers 200).
	for {
		pending := false
		for _, id := range ids {
			l, _ := h.st.ListDeliveries(b.Context(), store.DeliveryFilter{WebhookID: id, Limit: 1})
			pending = pending || (len(l) > 0 && l[0].State == api.DeliveryPending)
		}
		if !pending {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(b.N*hooks)/time.Since(start).Seconds(), "deliveries/s")
}
