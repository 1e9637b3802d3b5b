// Package observe tests network observations of a real `cove serve` with
// real sandboxes: that they are stored and outlive a kill -9 of the
// server, a sleep and a wake, and termination; and that each names the
// command whose process made the connection (last_command_id), found by
// the sandbox's agent from the socket the gateway saw. The tests need root
// and the managed image (curl, python3); they skip otherwise.
package observe

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// slowReply is how long the test host waits before it answers /slow: a
// destination some way off, as real ones are.
const slowReply = time.Second

// obsSandbox starts a server on the managed image whose resolver knows
// web.test and other.test as a test host serving HTTP on port 80, and a
// sandbox in it that may reach web.test on port 80 only.
func obsSandbox(t testing.TB) (*e2etest.Server, *e2etest.TestHost, api.Sandbox) {
	t.Helper()
	e2etest.RequireRoot(t)
	if e2etest.ManagedDir() == "" {
		t.Skip("COVE_TEST_IMAGES is not set: these tests use curl and python3 of the managed image")
	}
	host := e2etest.StartTestHost(t)
	host.ServeHTTP(t, host.Addr.String()+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(slowReply)
		}
		io.WriteString(w, "hello")
	}))
	// No warm pool: twice in a dozen runs a new sandbox's first DNS
	// queries got no answer while the pool's sandbox was being started at
	// the same moment (the resolver never saw them); that is the fence's
	// to explain, and these tests are about what comes after.
	s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs("--warm-pool", "0",
		"--dns-static", "web.test="+host.Addr.String(), "--dns-static", "other.test="+host.Addr.String()))
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"web.test:80"}}})
	return s, host, sb
}

const curl = "curl -sS --max-time 10 "

// run runs a command in the sandbox and returns its ID; it must exit with
// code want.
func run(t testing.TB, s *e2etest.Server, id, command string, want int, opts ...func(*api.CreateCommandRequest)) string {
	t.Helper()
	res := e2etest.Sh(t, s.Admin, id, command, append(opts, e2etest.WithTimeout(30))...)
	if got := e2etest.ExitCode(res); got != want {
		t.Fatalf("%q: exit %d, want %d\nstdout: %s\nstderr: %s", command, got, want, res.Stdout, res.Stderr)
	}
	return res.Command.ID
}

// observations returns the sandbox's observations by "destination:port
// decision".
func observations(t testing.TB, s *e2etest.Server, id string) map[string]api.NetworkObservation {
	t.Helper()
	v, err := s.Admin.Network(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]api.NetworkObservation{}
	for _, o := range v.Observations {
		out[fmt.Sprintf("%s:%d %s", o.Destination, o.Port, o.Decision)] = o
	}
	return out
}

// waitObservation waits until the sandbox's observation key satisfies ok.
func waitObservation(t testing.TB, s *e2etest.Server, id, key string, ok func(api.NetworkObservation) bool) api.NetworkObservation {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		o, found := observations(t, s, id)[key]
		if found && ok(o) {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("observation %q: %+v (found %v); all: %+v", key, o, found, observations(t, s, id))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func deniedEvents(t testing.TB, s *e2etest.Server, sandboxID string) []api.Event {
	t.Helper()
	l, err := s.Admin.Events(t.Context(), cove.EventQuery{Sandbox: sandboxID, Types: []string{"network.denied"}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}
