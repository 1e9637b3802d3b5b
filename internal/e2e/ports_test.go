package e2e

import (
	"encoding/json"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestPortZero: two servers with every listener on port 0 come up side by
// side, each reports the ports it bound in its ready file and in /healthz,
// no two ports are the same, and each fence sends its sandboxes' DNS to
// its own resolver. A graceful stop removes the ready file.
func TestPortZero(t *testing.T) {
	servers := []*e2etest.Server{
		e2etest.StartServer(t, e2etest.WithArgs("--dns-static", "probe.test=10.1.1.1")),
		e2etest.StartServer(t, e2etest.WithArgs("--dns-static", "probe.test=10.2.2.2")),
	}
	seen := map[string]string{}
	for i, s := range servers {
		status, _, body := e2etest.RawRequest(t, "GET", s.URL+"/healthz", "", "")
		var h struct {
			Status    string            `json:"status"`
			Listeners map[string]string `json:"listeners"`
		}
		if status != 200 || json.Unmarshal(body, &h) != nil || h.Status != "ok" {
			t.Fatalf("server %d healthz: %d %s", i, status, body)
		}
		if d := cmp.Diff(s.Listeners(), h.Listeners); d != "" {
			t.Errorf("server %d: healthz and ready file differ (-ready +healthz):\n%s", i, d)
		}
		for _, name := range []string{"api", "gateway", "dns"} {
			_, port, err := net.SplitHostPort(h.Listeners[name])
			if err != nil || port == "0" {
				t.Fatalf("server %d: %s listener %q", i, name, h.Listeners[name])
			}
			if other, ok := seen[port]; ok {
				t.Errorf("server %d: %s port %s is also %s's", i, name, port, other)
			}
			seen[port] = name
		}
	}

	for i, want := range []string{"10.1.1.1", "10.2.2.2"} {
		s := servers[i]
		sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"probe.test"}}})
		if out := e2etest.MustOK(t, s.Admin, sb.ID, "nslookup probe.test"); !strings.Contains(out, want) {
			t.Errorf("server %d: probe.test resolved as\n%s\nwant %s", i, out, want)
		}
	}

	s := servers[0]
	s.TerminateAll() // cleanup terminates only through a running server
	s.Stop(syscall.SIGTERM)
	if _, err := os.Stat(s.ReadyFile()); !os.IsNotExist(err) {
		t.Errorf("ready file after a graceful stop: %v", err)
	}
}
