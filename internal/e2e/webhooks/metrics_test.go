package webhooks

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// scrape GETs a /metrics URL with key ("" for none) and parses the answer
// with Prometheus's text parser.
func scrape(t *testing.T, url, key string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET %s: %s (%s)", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return fams
}

// sample is the value of a family's sample with those labels (a
// histogram's count), or 0 when there is none.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
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
	return 0
}

// TestMetrics: GET /metrics parses with Prometheus's text parser, for the
// admin key on the API and without a key on --metrics-listen; a team's
// key gets 403 and no key 401; counters of sandboxes, commands and API
// requests move when a sandbox is created and a command runs.
func TestMetrics(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--metrics-listen", "127.0.0.1:0", "--warm-pool", "0"))
	s.NewTeam("viewer")
	apiURL := s.URL + "/metrics"
	opsURL := "http://" + s.Listeners()["metrics"] + "/metrics"
	if s.Listeners()["metrics"] == "" {
		t.Fatalf("no metrics listener reported: %v", s.Listeners())
	}

	status, er, body := e2etest.RawRequest(t, "GET", apiURL, "", "")
	if status != http.StatusUnauthorized || er.Error == nil || er.Error.Code != api.CodeUnauthenticated {
		t.Errorf("no key: %d %s", status, body)
	}
	teamKey := s.Keys()[1]
	status, er, body = e2etest.RawRequest(t, "GET", apiURL, teamKey, "")
	if status != http.StatusForbidden || er.Error == nil || er.Error.Code != api.CodePermissionDenied {
		t.Errorf("a team's key: %d %s", status, body)
	}

	before := scrape(t, apiURL, s.AdminKey)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	e2etest.MustOK(t, s.Admin, sb.ID, "true")
	e2etest.MustOK(t, s.Admin, sb.ID, "echo two")
	// Commands end, and their exits are counted, as the server records
	// them, which may come just after a waiting call returned: scrape until
	// the counts are there (or report what they were at the end).
	checks := []struct {
		name   string
		labels []string
		least  float64
	}{
		{"cove_commands_started_total", nil, 2},
		{"cove_commands_ended_total", []string{"outcome", "exited"}, 2},
		{"cove_command_exec_seconds", nil, 2},
		{"cove_sandbox_create_seconds", []string{"outcome", "running"}, 1},
		{"cove_api_requests_total", []string{"route", "POST /v1/sandboxes", "code", "201"}, 1},
		{"cove_api_requests_total", []string{"route", "POST /v1/sandboxes/{ref}/commands", "code", "201"}, 2},
		{"cove_store_seconds", []string{"op", "create_sandbox_event"}, 1},
	}
	var after map[string]*dto.MetricFamily
	var short []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		after = scrape(t, opsURL, "")
		short = nil
		for _, c := range checks {
			if d := sample(after, c.name, c.labels...) - sample(before, c.name, c.labels...); d < c.least {
				short = append(short, fmt.Sprintf("%s%v moved by %v; want at least %v", c.name, c.labels, d, c.least))
			}
		}
		if len(short) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, s := range short {
		t.Error(s)
	}
	if n := sample(after, "cove_sandboxes", "state", "running"); n < 1 {
		t.Errorf("cove_sandboxes{state=running} = %v", n)
	}
	if sample(after, "cove_api_requests_total", "route", "GET /metrics", "code", "403") < 1 {
		t.Errorf("the refused scrape was not counted")
	}
	for _, name := range []string{"cove_gateway_bytes_total", "cove_gateway_decisions_total", "cove_webhook_attempts_total", "go_goroutines"} {
		if after[name] == nil {
			t.Errorf("%s is missing", name)
		}
	}
}
