package replicas

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// goroutineTB is a testing.TB for a helper run on a goroutine of its own:
// its Fatal ends that goroutine and hands the failure to the test.
type goroutineTB struct {
	testing.TB
	failed chan<- string
}

func (g goroutineTB) Fatal(args ...any) {
	g.failed <- fmt.Sprint(args...)
	runtime.Goexit()
}

func (g goroutineTB) Fatalf(format string, args ...any) {
	g.failed <- fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestDatabaseRestart restarts PostgreSQL (fast: every session cut)
// while a client sends mutations through both replicas: the replicas
// reconnect, each mutation answered 2xx has its effect exactly once, and
// replays answer the same.
func TestDatabaseRestart(t *testing.T) {
	f, pg := startFleet(t)
	c := newClient(t, f, f.Control.AdminKey)
	run := e2etest.RunID()

	const sandboxes, rounds = 3, 10
	ids := make([]string, sandboxes)
	for i := range ids {
		a := c.must("", "POST", "/v1/sandboxes?wait=running", fmt.Sprintf("%s-create-%d", run, i), fmt.Sprintf(`{"name":"db-%s-%d"}`, run, i))
		ids[i] = decode[api.Sandbox](t, a).ID
	}
	execs := make([][]string, sandboxes)
	failed := make(chan string, 1)
	restarted := make(chan struct{})
	for r := range rounds {
		if r == 2 {
			go func() { // ends once the cluster runs again
				defer close(restarted)
				pg.Restart(goroutineTB{TB: t, failed: failed})
			}()
		}
		for i, id := range ids {
			key := fmt.Sprintf("%s-exec-%d-%d", run, i, r)
			a := c.must("", "POST", "/v1/sandboxes/"+id+"/commands?wait=true", key,
				fmt.Sprintf(`{"command":"echo %s >> /workspace/log; grep -cx %s /workspace/log"}`, key, key))
			if res := decode[api.CommandResult](t, a); res.Stdout != "1\n" {
				t.Errorf("%s: stdout %q stderr %q", key, res.Stdout, res.Stderr)
			}
			execs[i] = append(execs[i], key)
			c.must("", "PATCH", "/v1/sandboxes/"+id, fmt.Sprintf("%s-label-%d-%d", run, i, r), fmt.Sprintf(`{"labels":{"round":"%d"}}`, r))
		}
	}
	<-restarted
	select {
	case msg := <-failed:
		t.Fatal(msg)
	default:
	}
	retried := 0
	for _, a := range c.answers {
		retried += a.Retries
	}
	t.Logf("%d mutations across a restart of the database; %d attempts retried", len(c.answers), retried)

	for i, id := range ids {
		sb := c.waitState(id, api.StateRunning)
		if sb.Labels["round"] != fmt.Sprint(rounds-1) {
			t.Errorf("sandbox %d: labels %v", i, sb.Labels)
		}
		if log := e2etest.MustOK(t, f.Running().Admin, id, "cat /workspace/log"); log != strings.Join(execs[i], "\n")+"\n" {
			t.Errorf("sandbox %d ran its commands as\n%s\nwant\n%s", i, log, strings.Join(execs[i], "\n"))
		}
	}
	checkReplays(t, f, c)
	if got := len(listSandboxes(t, c)); got != sandboxes {
		t.Errorf("%d sandboxes, want %d", got, sandboxes)
	}
	// Both replicas use the database again, and one of them leads.
	for _, r := range f.Controls {
		waitFor(t, 30*time.Second, r.URL+" reaches its store", func() (bool, string) {
			h, err := r.Health()
			return err == nil && h.Store == "ok", fmt.Sprintf("%+v %v", h, err)
		})
	}
	f.WaitLeader(30 * time.Second)
	// And they place new sandboxes.
	for i := range 2 {
		a := c.must(f.Controls[i].URL, "POST", "/v1/sandboxes?wait=running", fmt.Sprintf("%s-after-%d", run, i), "{}")
		id := decode[api.Sandbox](t, a).ID
		if out := e2etest.MustOK(t, f.Controls[i].Admin, id, "echo after"); out != "after\n" {
			t.Errorf("exec after the restart: %q", out)
		}
	}
}
