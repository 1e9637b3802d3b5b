package fence

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestPipelinedRequests: a sandbox allowed web.test sends two requests in
// one write on one connection to web.test's address, the second for
// other.test (same address, not allowed). The gateway forwards the first
// alone and closes after its response: the server never reads the second.
func TestPipelinedRequests(t *testing.T) {
	host := e2etest.StartTestHost(t)
	var mu sync.Mutex
	var seen []string
	host.ServeHTTP(t, host.Addr.String()+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+r.URL.Path)
		mu.Unlock()
		fmt.Fprintf(w, "hello from %s", r.Host)
	}))
	s := e2etest.StartServer(t, e2etest.WithArgs("--dns-static", "web.test="+host.Addr.String(), "--dns-static", "other.test="+host.Addr.String()))
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"web.test"}}})

	res := e2etest.Sh(t, s.Admin, sb.ID, `nslookup web.test >/dev/null && `+
		`printf 'GET /one HTTP/1.1\r\nHost: web.test\r\n\r\nGET /two HTTP/1.1\r\nHost: other.test\r\n\r\n' | nc -w 5 web.test 80`,
		e2etest.WithTimeout(30))
	out := res.Stdout
	if res.Command.State != api.CommandExited || strings.Count(out, "HTTP/1.1 ") != 1 || !strings.Contains(out, "hello from web.test") || strings.Contains(out, "other.test") {
		t.Errorf("%s, exit %d; responses:\n%s\nstderr: %s", res.Command.State, e2etest.ExitCode(res), out, res.Stderr)
	}
	// The connection has ended (nc exited on the gateway's close): the
	// server read all it was ever sent.
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "web.test/one" {
		t.Errorf("the server read %q, want only web.test/one", seen)
	}
}
