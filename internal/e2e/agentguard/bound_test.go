package agentguard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// agentBound is how long any call to a sandbox whose agent does not
// answer may take to fail: the agent client's 30s bound (short calls'
// Call, watched calls' Silence, both counted from the request), plus a
// generous margin for a busy test machine. Before the bound held for
// watched calls, a file read took up to 45s (a ping due after 15s, then 30s
// of silence).
const agentBound = 35 * time.Second

// TestHungAgentFailsEveryCallWithinTheBound: with a sandbox's agent stopped
// (SIGSTOP), an exec, a file read, a file write, an archive download and a
// stdin stream each answer 503 unavailable, and an attach to a command
// with stdin is closed as "try again later" (1013, the WebSocket's 503)
// with the same message, each within agentBound of its request.
func TestHungAgentFailsEveryCallWithinTheBound(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	e2etest.MustOK(t, s.Admin, sb.ID, "echo hello > /tmp/f && mkdir -p /tmp/d && echo x > /tmp/d/x")
	cat, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "cat", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := stopAgent(t, s, sb.ID)

	base := s.URL + "/v1/sandboxes/" + sb.ID
	file := "?path=" + url.QueryEscape("/tmp/f")
	calls := []struct {
		name, method, url, ctype, body string
	}{
		{"exec", "POST", base + "/commands", "application/json", `{"command":"true"}`},
		{"file read", "GET", base + "/files/content" + file, "", ""},
		{"file write", "PUT", base + "/files/content" + file, "application/octet-stream", "new content\n"},
		{"archive download", "GET", base + "/files/archive?path=" + url.QueryEscape("/tmp/d"), "", ""},
		{"stdin", "POST", base + "/commands/" + cat.ID + "/stdin", "application/octet-stream", "input\n"},
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() {
			start := time.Now()
			status, er, err := request(ctx, c.method, c.url, s.AdminKey, c.ctype, c.body)
			took := time.Since(start)
			switch {
			case err != nil:
				t.Errorf("%s on a stopped agent: %v after %v", c.name, err, took)
			case status != http.StatusServiceUnavailable || er.Error.Code != api.CodeUnavailable:
				t.Errorf("%s on a stopped agent: %d %+v, want 503 unavailable", c.name, status, er.Error)
			case took > agentBound:
				t.Errorf("%s on a stopped agent answered 503 after %v, want within %v", c.name, took, agentBound)
			}
		})
	}
	wg.Go(func() {
		start := time.Now()
		code, reason, err := attachAndType(ctx, s, sb.ID, cat.ID)
		took := time.Since(start)
		switch {
		case err != nil:
			t.Errorf("attach on a stopped agent: %v after %v", err, took)
		case code != websocket.StatusTryAgainLater || !strings.HasPrefix(reason, "unavailable"):
			t.Errorf("attach on a stopped agent closed with %v %q, want %v unavailable", code, reason, websocket.StatusTryAgainLater)
		case took > agentBound:
			t.Errorf("attach on a stopped agent closed after %v, want within %v", took, agentBound)
		}
	})
	wg.Wait()
	// An answer from the agent would have meant it ran meanwhile.
	if states, err := threadStates(stop); err != nil || strings.Trim(states, "T") != "" {
		t.Errorf("the agent's threads are %q (%v) after the calls; want all stopped", states, err)
	}
}

// guardWait keeps a broken server from hanging the test: far beyond every
// bound.
const guardWait = 5 * time.Minute

// request sends one API request and reads its answer.
func request(ctx context.Context, method, u, key, ctype, body string) (int, api.ErrorResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, guardWait)
	defer cancel()
	var er api.ErrorResponse
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		return 0, er, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, er, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, er, err
	}
	_ = json.Unmarshal(b, &er) // a success has no error to read
	return resp.StatusCode, er, nil
}

// attachAndType attaches to a command, types a line and reads until the
// server closes the socket; it returns the close status and reason.
func attachAndType(ctx context.Context, s *e2etest.Server, ref, id string) (websocket.StatusCode, string, error) {
	ctx, cancel := context.WithTimeout(ctx, guardWait)
	defer cancel()
	u := "ws" + strings.TrimPrefix(s.URL, "http") + "/v1/sandboxes/" + ref + "/commands/" + id + "/attach"
	conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + s.AdminKey}}})
	if err != nil {
		return 0, "", err
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageBinary, []byte("typed\n")); err != nil {
		return 0, "", err
	}
	for {
		if _, _, err := conn.Read(ctx); err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code, ce.Reason, nil
			}
			return 0, "", err
		}
	}
}
