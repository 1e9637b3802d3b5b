// Package tickets tests browser sign-in for attach: a WebSocket opened
// with a ticket and no Authorization header, as a page does.
package tickets

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestAttachWithTicket(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	c, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "read line; echo got $line", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/sandboxes/" + sb.ID + "/commands/" + c.ID + "/attach"
	tk, err := s.Admin.CreateTicket(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	wsURL := "ws" + strings.TrimPrefix(s.URL, "http") + path + "?ticket=" + tk.Ticket
	// As a page of the server's own origin: an Origin header and no key.
	page := http.Header{"Origin": {s.URL}}
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: page})
	if err != nil {
		t.Fatalf("attach with a ticket: %v", err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageBinary, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("read after %q: %v", out.String(), err)
		}
		if typ == websocket.MessageText {
			if !strings.Contains(string(b), `"exit_code":0`) {
				t.Fatalf("exit frame %s", b)
			}
			break
		}
		out.Write(b)
	}
	if out.String() != "got hello\n" {
		t.Fatalf("output through the ticketed attach: %q", out.String())
	}
	conn.Close(websocket.StatusNormalClosure, "")

	// Used once: the same ticket opens nothing now.
	_, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: page})
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("second attach with one ticket: %v %v, want 401", err, resp)
	}
}
