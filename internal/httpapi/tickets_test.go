package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
	cove "github.com/cove-dev/cove/sdk/go"
)

// TestTickets checks that a ticket authenticates the one attach it names,
// once, as the key that asked for it, and nothing else.
func TestTickets(t *testing.T) {
	s := newTestServer(t)
	const path = "/v1/sandboxes/sbx_1/commands/cmd_1/attach"
	s.fake.GetCommandFn = func(_ context.Context, team, ref, id string) (api.Command, error) {
		if team != teamA || ref != "sbx_1" || id != "cmd_1" {
			return api.Command{}, notFound("command", id)
		}
		return api.Command{ID: id}, nil
	}
	// The attach answers 503 "attached as TEAM" once authenticated, so
	// that the test sees whose request it was without a WebSocket.
	s.fake.CommandOutputFn = func(_ context.Context, team, _, _ string) (api.Command, node.Output, error) {
		return api.Command{}, nil, api.Errorf(api.CodeUnavailable, "attached as %s", team)
	}
	attach := func(query string) (int, string) {
		t.Helper()
		resp, err := http.Get(s.url + path + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.ErrorResponse
		json.NewDecoder(resp.Body).Decode(&e)
		if e.Error == nil {
			return resp.StatusCode, ""
		}
		return resp.StatusCode, e.Error.Message
	}
	issue := func() string {
		t.Helper()
		tk, err := s.client.CreateTicket(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Path != path || time.Until(tk.ExpiresAt) <= 0 {
			t.Fatalf("ticket %+v", tk)
		}
		return tk.Ticket
	}

	tk := issue()
	if code, msg := attach("?ticket=" + tk); code != http.StatusServiceUnavailable || msg != "attached as "+teamA {
		t.Fatalf("attach with a ticket: %d %q, want it to act as %s", code, msg, teamA)
	}
	if code, _ := attach("?ticket=" + tk); code != http.StatusUnauthorized {
		t.Fatalf("second use of a ticket: %d, want 401", code)
	}
	if code, _ := attach(""); code != http.StatusUnauthorized {
		t.Fatalf("attach with neither key nor ticket: %d, want 401", code)
	}
	if code, _ := attach("?ticket=tkt_made_up"); code != http.StatusUnauthorized {
		t.Fatalf("attach with a made-up ticket: %d, want 401", code)
	}

	// A ticket for one path does not open another, and is spent by trying.
	tk = issue()
	resp, err := http.Get(s.url + "/v1/sandboxes/sbx_1/commands/cmd_2/attach?ticket=" + tk)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("ticket on another attach: %d, want 401", resp.StatusCode)
	}
	if code, _ := attach("?ticket=" + tk); code != http.StatusUnauthorized {
		t.Fatalf("a ticket tried on another path still worked: %d", code)
	}
	// Tickets authenticate attaches only.
	tk = issue()
	resp, err = http.Get(s.url + "/v1/sandboxes?ticket=" + tk)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("ticket on a list: %d, want 401", resp.StatusCode)
	}

	// Expired: a minute later it is refused.
	tk = issue()
	s.h.sh.tickets.mu.Lock()
	s.h.sh.tickets.now = func() time.Time { return time.Now().Add(ticketTTL + time.Second) }
	s.h.sh.tickets.mu.Unlock()
	if code, _ := attach("?ticket=" + tk); code != http.StatusUnauthorized {
		t.Fatalf("expired ticket: %d, want 401", code)
	}
	s.h.sh.tickets.mu.Lock()
	s.h.sh.tickets.now = time.Now
	s.h.sh.tickets.mu.Unlock()

	// A revoked key's tickets are refused: the key is checked at use.
	tk = issue()
	s.fake.AuthenticateFn = func(ctx context.Context, key string) (lifecycle.Principal, error) {
		return lifecycle.Principal{}, api.Errorf(api.CodeUnauthenticated, "the API key is revoked")
	}
	if code, _ := attach("?ticket=" + tk); code != http.StatusUnauthorized {
		t.Fatalf("ticket of a revoked key: %d, want 401", code)
	}
	s.fake.AuthenticateFn = nil

	// Bad requests: another team's command, a path that is not an attach.
	for _, c := range []struct {
		key, path string
		want      api.Code
	}{
		{keyB, path, api.CodeNotFound},
		{keyA, "/v1/sandboxes", api.CodeInvalidArgument},
		{keyA, path + "/../../../../teams", api.CodeInvalidArgument},
	} {
		cl := s.client
		if c.key == keyB {
			cl = cove.New(s.url, keyB)
		}
		if _, err := cl.CreateTicket(t.Context(), c.path); codeOf(err) != c.want {
			t.Errorf("ticket for %s with %s: %v, want %s", c.path, c.key, err, c.want)
		}
	}

	// A team holds a bounded number (the one tried on a list is unused).
	for range maxTicketsTeam - 1 {
		issue()
	}
	if _, err := s.client.CreateTicket(t.Context(), path); codeOf(err) != api.CodeResourceExhausted {
		t.Fatalf("ticket past the bound: %v, want resource_exhausted", err)
	}
}

func codeOf(err error) api.Code {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
