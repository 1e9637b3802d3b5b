// Package setup tests a sandbox's setup command against a real `cove
// serve`: it runs as a recorded command under its own network policy,
// which ends when the sandbox runs; a failing setup fails the sandbox with
// its output kept.
package setup

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func output(t *testing.T, c *cove.Client, ref, id string) string {
	t.Helper()
	var b strings.Builder
	err := c.Output(t.Context(), ref, id, 0, false, func(r api.OutputRecord) error {
		b.Write(r.Data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// streams is a command's recorded output, each stream's on its own.
func streams(t *testing.T, c *cove.Client, ref, id string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := c.Output(t.Context(), ref, id, 0, false, func(r api.OutputRecord) error {
		if len(r.Data) > 0 {
			out[r.Stream] += string(r.Data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func eventTypes(t *testing.T, c *cove.Client, sandboxID string) []string {
	t.Helper()
	l, err := c.Events(t.Context(), cove.EventQuery{Sandbox: sandboxID})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range l.Items {
		types = append(types, e.Type)
	}
	return types
}

// TestSetupNetwork: the setup fetches from a test host that only
// setup.network allows; once the sandbox runs, the same fetch is denied,
// and the node observed both.
func TestSetupNetwork(t *testing.T) {
	host := e2etest.StartTestHost(t)
	host.ServeHTTP(t, host.Addr.String()+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "package-bytes")
	}))
	s := e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs("--warm-pool", "0", "--dns-static", "pkg.test="+host.Addr.String()))
	c := s.Admin
	// Retries: on a loaded machine a first lookup may time out.
	fetch := "curl -sS --max-time 10 --retry 3 --retry-all-errors --retry-delay 1 http://pkg.test/pkg"
	sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{
		Network: &api.NetworkPolicy{Allow: []string{}},
		Setup: &api.Setup{
			Command: "echo fetching; " + fetch + " > /workspace/pkg.txt",
			Network: &api.NetworkPolicy{Allow: []string{"pkg.test"}},
		},
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateRunning || sb.SetupCommandID == "" {
		t.Fatalf("after setup: %s (%s), setup command %q", sb.State, sb.StateReason, sb.SetupCommandID)
	}
	if got := e2etest.MustOK(t, c, sb.ID, "cat /workspace/pkg.txt"); got != "package-bytes" {
		t.Fatalf("what the setup fetched: %q", got)
	}
	cmd, err := c.GetCommand(t.Context(), sb.ID, sb.SetupCommandID)
	if err != nil || cmd.State != api.CommandExited || *cmd.ExitCode != 0 {
		t.Fatalf("setup command: %+v, %v", cmd, err)
	}
	if out := output(t, c, sb.ID, sb.SetupCommandID); out != "fetching\n" {
		t.Fatalf("setup output: %q", out)
	}
	// The sandbox's own policy now: the same fetch is denied.
	res := e2etest.Sh(t, c, sb.ID, fetch, e2etest.WithTimeout(30))
	if e2etest.ExitCode(res) == 0 || strings.Contains(res.Stdout, "package-bytes") {
		t.Fatalf("after setup the fetch got through: %+v", res)
	}
	view, err := c.Network(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var allowed, denied bool
	for _, o := range view.Observations {
		if strings.Contains(o.Destination, "pkg.test") || o.Destination == host.Addr.String() {
			switch o.Decision {
			case "allowed":
				allowed = true
			case "denied":
				denied = true
			}
		}
	}
	if !allowed || !denied {
		t.Fatalf("observations %+v: want pkg.test allowed (setup) and denied (after)", view.Observations)
	}
	ev := eventTypes(t, c, sb.ID)
	for _, want := range []string{"sandbox.setting_up", "setup.exited", "sandbox.running", "network.denied"} {
		if !slices.Contains(ev, want) {
			t.Fatalf("events %v lack %s", ev, want)
		}
	}
}

// TestSetupFails: a setup that exits non-zero, and one that outlives its
// timeout, fail the sandbox with a reason naming how; ?wait=running
// returns; the setup's output stays readable until the sandbox is deleted.
func TestSetupFails(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	c := s.Admin
	for _, tt := range []struct {
		name, command string
		timeout       int64
		reason        string
		out           map[string]string // by stream: their order across streams is not kept
	}{
		{"exit 3", "echo building; echo broken >&2; exit 3", 0, "exited with code 3", map[string]string{"stdout": "building\n", "stderr": "broken\n"}},
		{"timeout", "echo slow; sleep 60", 2, "timed out after 2 s", map[string]string{"stdout": "slow\n"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Setup: &api.Setup{Command: tt.command, TimeoutS: tt.timeout}}, true)
			if err != nil {
				t.Fatal(err)
			}
			if sb.State != api.StateFailed || !strings.Contains(sb.StateReason, tt.reason) || !strings.Contains(sb.StateReason, sb.SetupCommandID) {
				t.Fatalf("after a failing setup: %s (%q), setup command %q", sb.State, sb.StateReason, sb.SetupCommandID)
			}
			if time.Since(start) > 45*time.Second {
				t.Fatalf("?wait=running took %v", time.Since(start))
			}
			if out := streams(t, c, sb.ID, sb.SetupCommandID); !maps.Equal(out, tt.out) {
				t.Fatalf("setup output replayed: %q; want %q", out, tt.out)
			}
			if ev := eventTypes(t, c, sb.ID); !slices.Contains(ev, "setup.exited") || !slices.Contains(ev, "sandbox.failed") {
				t.Fatalf("events: %v", ev)
			}
			if _, err := c.TerminateSandbox(t.Context(), sb.ID); err != nil {
				t.Fatal(err)
			}
			if sb, err = c.WaitSandbox(t.Context(), sb.ID, api.StateTerminated, time.Minute); err != nil || sb.State != api.StateTerminated {
				t.Fatalf("delete a failed sandbox: %+v, %v", sb, err)
			}
			err = c.Output(t.Context(), sb.ID, sb.SetupCommandID, 0, false, func(api.OutputRecord) error { return nil })
			if api.ErrorCode(err) != api.CodeNotFound {
				t.Fatalf("output after delete: %v; want not_found", err)
			}
		})
	}
}

// TestSetupCache: with setup.cache the second create of the same
// definition starts from the first one's disk without running the setup;
// both times are logged.
func TestSetupCache(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	c := s.Admin
	req := api.CreateSandboxRequest{Setup: &api.Setup{
		Command: "sleep 3; mkdir -p /workspace/deps && echo built-$RANDOM > /workspace/deps/stamp",
		Cache:   true,
	}}
	create := func() (api.Sandbox, time.Duration) {
		t.Helper()
		start := time.Now()
		sb, err := c.CreateSandbox(t.Context(), req, true)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != api.StateRunning {
			t.Fatalf("sandbox %s: %s (%s)", sb.ID, sb.State, sb.StateReason)
		}
		return sb, time.Since(start)
	}
	first, t1 := create()
	second, t2 := create()
	t.Logf("create with setup (sleep 3) and cache save: %v; create from the cache: %v", t1, t2)
	if first.SetupCached || first.SetupCommandID == "" || !second.SetupCached || second.SetupCommandID != "" {
		t.Fatalf("first: cached %v command %q; second: cached %v command %q",
			first.SetupCached, first.SetupCommandID, second.SetupCached, second.SetupCommandID)
	}
	a := e2etest.MustOK(t, c, first.ID, "cat /workspace/deps/stamp")
	b := e2etest.MustOK(t, c, second.ID, "cat /workspace/deps/stamp; hostname")
	if !strings.HasPrefix(b, a) {
		t.Fatalf("cached files: first %q, second %q", a, b)
	}
	if ev := eventTypes(t, c, second.ID); slices.Contains(ev, "sandbox.setting_up") {
		t.Fatalf("the cached create set up: %v", ev)
	}
	// The cached files were written in the first sandbox's host ID range;
	// the second has its own, and sees them as its own user's.
	if owner := e2etest.MustOK(t, c, second.ID, "stat -c %U:%G /workspace/deps /workspace/deps/stamp"); owner != "user:user\nuser:user\n" {
		t.Fatalf("owners of the cached files in the second sandbox: %q", owner)
	}
	// Each sandbox writes on its own disk.
	e2etest.MustOK(t, c, second.ID, "echo mine > /workspace/deps/stamp")
	if got := e2etest.MustOK(t, c, first.ID, "cat /workspace/deps/stamp"); got != a {
		t.Fatalf("a write in the second sandbox reached the first: %q", got)
	}
}
