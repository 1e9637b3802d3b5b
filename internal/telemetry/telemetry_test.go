package telemetry

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cove-dev/cove/api"
)

// scrape serves the metrics and parses them with Prometheus's own text
// parser.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	return fams
}

// value finds the sample of a family with the given labels (a counter's,
// a gauge's value, or a histogram's count).
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func TestMetricsMove(t *testing.T) {
	counts := map[api.SandboxState]int{api.StateRunning: 2, api.StateAsleep: 1}
	m := New(func(context.Context) (map[api.SandboxState]int, error) { return counts, nil }, slog.New(slog.DiscardHandler))
	before := scrape(t, m)
	if v := value(before, "cove_commands_started_total", nil); v != 0 {
		t.Fatalf("commands started before: %v", v)
	}
	if v := value(before, "cove_sandboxes", map[string]string{"state": "running"}); v != 2 {
		t.Fatalf("running sandboxes: %v", v)
	}
	for _, e := range []api.Event{
		{Type: "sandbox.creating", SandboxID: "sbx_1"},
		{Type: "sandbox.running", SandboxID: "sbx_1"},
		{Type: "command.started", SandboxID: "sbx_1"},
		{Type: "command.exited", SandboxID: "sbx_1", Data: map[string]any{"state": api.CommandExited}},
		{Type: "command.exited", SandboxID: "sbx_1", Data: map[string]any{"state": "timed_out"}},
		{Type: "sandbox.waking", SandboxID: "sbx_1"},
		{Type: "sandbox.asleep", SandboxID: "sbx_1"},
		{Type: "sandbox.running", SandboxID: "sbx_2"}, // no start seen: not timed
	} {
		m.Event(e)
	}
	m.Exec(3 * time.Millisecond)
	m.WebhookAttempt("retry", time.Millisecond)
	m.WebhookAttempt("delivered", time.Millisecond)
	m.GatewayDecision("denied")
	m.GatewayBytes(10, 20)
	after := scrape(t, m)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cove_commands_started_total", nil, 1},
		{"cove_commands_ended_total", map[string]string{"outcome": "exited"}, 1},
		{"cove_commands_ended_total", map[string]string{"outcome": "timed_out"}, 1},
		{"cove_commands_ended_total", map[string]string{"outcome": "lost"}, 0},
		{"cove_sandbox_create_seconds", map[string]string{"outcome": "running"}, 1},
		{"cove_sandbox_wake_seconds", map[string]string{"outcome": "asleep"}, 1},
		{"cove_command_exec_seconds", nil, 1},
		{"cove_webhook_attempts_total", map[string]string{"outcome": "retry"}, 1},
		{"cove_webhook_attempts_total", map[string]string{"outcome": "failed"}, 0},
		{"cove_gateway_decisions_total", map[string]string{"decision": "denied"}, 1},
		{"cove_gateway_bytes_total", map[string]string{"direction": "in"}, 20},
		{"cove_sandboxes", map[string]string{"state": "asleep"}, 1},
		{"cove_sandboxes", map[string]string{"state": "creating"}, 0},
	} {
		if got := value(after, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v; want %v", c.name, c.labels, got, c.want)
		}
	}
	if len(m.since) != 0 {
		t.Errorf("timings left: %v", m.since)
	}
	if after["go_goroutines"] == nil || after["process_cpu_seconds_total"] == nil {
		t.Errorf("the runtime's and the process's metrics are missing")
	}
}

func TestMiddlewareRoutes(t *testing.T) {
	m := New(nil, slog.New(slog.DiscardHandler))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{ref}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("ref") == "missing" {
			http.Error(w, "no", http.StatusNotFound)
		}
	})
	mux.HandleFunc("GET /v1/stream", func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush through the middleware: %v", err)
		}
	})
	srv := httptest.NewServer(m.Middleware(mux))
	defer srv.Close()
	for _, p := range []string{"/v1/sandboxes/a", "/v1/sandboxes/b", "/v1/sandboxes/missing", "/v1/stream", "/nowhere"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		// The whole answer: the server ends it after the handler (and
		// the middleware's count) returned.
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	fams := scrape(t, m)
	for _, c := range []struct {
		route, code string
		want        float64
	}{
		{"GET /v1/sandboxes/{ref}", "200", 2},
		{"GET /v1/sandboxes/{ref}", "404", 1},
		{"GET /v1/stream", "200", 1},
		{"unmatched", "404", 1},
	} {
		if got := value(fams, "cove_api_requests_total", map[string]string{"route": c.route, "code": c.code}); got != c.want {
			t.Errorf("requests %s %s = %v; want %v", c.route, c.code, got, c.want)
		}
	}
}
