// Package eventstreams tests that one team cannot hold an unbounded
// number of event streams open against the server, as a tenant with its
// own key would try.
package eventstreams

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// openStream opens GET /v1/events/stream with key and returns the response
// (its body open when the status is 200, closed at the end of the test).
func openStream(t *testing.T, ctx context.Context, url, key string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", url+"/v1/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestEventStreamsPerTeam(t *testing.T) {
	const limit = 16 // the documented default of --max-event-streams-per-team
	s := e2etest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	teamKey := func(name string) string {
		r, err := s.Admin.CreateTeam(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return r.APIKey
	}
	a, b := teamKey("streams-a"), teamKey("streams-b")

	// The tenant opens as many streams as it may: each is served.
	var open []*http.Response
	for i := range limit {
		resp := openStream(t, ctx, s.URL, a)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: status %d, want 200", i+1, resp.StatusCode)
		}
		open = append(open, resp)
	}
	// One more is refused, saying why and when to retry.
	refused := openStream(t, ctx, s.URL, a)
	if refused.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("stream %d: status %d, want 429", limit+1, refused.StatusCode)
	}
	if refused.Header.Get("Retry-After") == "" {
		t.Errorf("refused stream has no Retry-After")
	}
	var er api.ErrorResponse
	if err := json.NewDecoder(refused.Body).Decode(&er); err != nil {
		t.Fatal(err)
	}
	if er.Error == nil || er.Error.Code != api.CodeResourceExhausted || !strings.Contains(er.Error.Message, "event streams") {
		t.Fatalf("refusal: %+v", er.Error)
	}

	// Another team is not affected by the first one's streams.
	if resp := openStream(t, ctx, s.URL, b); resp.StatusCode != http.StatusOK {
		t.Fatalf("other team's stream: status %d, want 200", resp.StatusCode)
	}

	// Closing a stream frees its slot: the server notices the client
	// gone, so a new stream is let in within a bounded wait.
	open[0].Body.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := openStream(t, ctx, s.URL, a)
		if resp.StatusCode == http.StatusOK {
			break
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("stream after closing one: status %d", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
