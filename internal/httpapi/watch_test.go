package httpapi

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/node"
)

// idleWatch is a watch with nothing to say: Next waits for its context.
type idleWatch struct{}

func (w *idleWatch) Next(ctx context.Context) (api.FileEvent, error) {
	<-ctx.Done()
	return api.FileEvent{}, ctx.Err()
}

func (w *idleWatch) Close() {}

// openWatch starts a watch stream of a sandbox as the key's team and
// returns its answer, the body left open for a 200 (closed with the
// returned cancel, or with the test).
func openWatch(t *testing.T, s *testServer, key, ref string) (*http.Response, []byte, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/v1/sandboxes/"+ref+"/files/watch?path=/work", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("watch %s: %v", ref, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil, func() { cancel(); resp.Body.Close() }
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b, cancel
}

// TestWatchStreamBounds: a team holds at most --max-watch-streams-per-team
// watch streams over all its sandboxes and a sandbox at most
// watchStreamsPerSandbox; one more is 429 resource_exhausted with
// Retry-After, another team still gets its own, and a closed stream frees
// its slot.
func TestWatchStreamBounds(t *testing.T) {
	s := newTestServer(t)
	s.fake.WatchFilesFn = func(ctx context.Context, tg files.Target, q files.WatchQuery) (node.FileWatch, error) {
		return &idleWatch{}, nil
	}
	// A sandbox is named by its ID or its name ("name-" and its ID).
	s.fake.GetSandboxFn = func(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
		return api.Sandbox{ID: strings.TrimPrefix(ref, "name-"), TeamID: teamID}, nil
	}
	refused := func(t *testing.T, key, ref, scope string) {
		t.Helper()
		resp, b, _ := openWatch(t, s, key, ref)
		e := wantError(t, resp, b, http.StatusTooManyRequests, api.CodeResourceExhausted)
		if got := resp.Header.Get("Retry-After"); got != "5" {
			t.Errorf("Retry-After %q; want 5", got)
		}
		if e.Details["scope"] != scope {
			t.Errorf("refusal details %v; want scope %s", e.Details, scope)
		}
	}
	opened := func(t *testing.T, key, ref string) context.CancelFunc {
		t.Helper()
		resp, b, cancel := openWatch(t, s, key, ref)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("watch of %s answered %d %s; want 200", ref, resp.StatusCode, b)
		}
		return cancel
	}

	t.Run("per team", func(t *testing.T) {
		const limit = 3
		s.h.LimitWatchStreams(limit)
		t.Cleanup(func() { s.h.LimitWatchStreams(0) })
		var first context.CancelFunc
		for i, ref := range []string{"sb-1", "sb-1", "sb-2"} {
			c := opened(t, keyA, ref)
			if i == 0 {
				first = c
			}
		}
		// A fourth sandbox of the team is refused: the bound is the team's.
		refused(t, keyA, "sb-3", "team")
		// Another team's streams are its own.
		opened(t, keyB, "sb-b")
		// Closing one frees its slot, once the server has let it go.
		first()
		for {
			resp, b, cancel := openWatch(t, s, keyA, "sb-3")
			if resp.StatusCode == http.StatusOK {
				cancel()
				break
			}
			wantError(t, resp, b, http.StatusTooManyRequests, api.CodeResourceExhausted)
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("per sandbox", func(t *testing.T) {
		// By its ID and by its name: one sandbox's streams all the same.
		for i := range watchStreamsPerSandbox {
			ref := "sb-full"
			if i%2 == 1 {
				ref = "name-sb-full"
			}
			opened(t, keyA, ref)
		}
		refused(t, keyA, "sb-full", "sandbox")
		refused(t, keyA, "name-sb-full", "sandbox")
		// The team's other sandboxes still get theirs.
		opened(t, keyA, "sb-other")
	})
}
