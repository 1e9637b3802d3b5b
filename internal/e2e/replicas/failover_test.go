package replicas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// receiver is a webhook endpoint on loopback that keeps the events it was
// sent, by event ID.
type receiver struct {
	URL string

	mu     sync.Mutex
	events map[string]int // event ID → deliveries
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{events: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// The body is {"type", "timestamp", "data": the event}.
		var body struct {
			Data api.Event `json:"data"`
		}
		b, _ := io.ReadAll(req.Body)
		if err := json.Unmarshal(b, &body); err == nil && body.Data.ID != "" {
			r.mu.Lock()
			r.events[body.Data.ID]++
			r.mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go srv.Serve(ln) // ended by the cleanup's Close
	t.Cleanup(func() { srv.Close() })
	r.URL = "http://" + ln.Addr().String() + "/hook"
	return r
}

func (r *receiver) missing(events []api.Event) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var m []string
	for _, e := range events {
		if r.events[e.ID] == 0 {
			m = append(m, e.ID+" "+e.Type)
		}
	}
	return m
}

// step is one mutation of a sandbox in the failover run.
type step struct {
	// name says what it does, for the keys and the failures.
	name string
	// before is the state the sandbox is waited into first; "" none.
	before api.SandboxState
	// request is the method, path (after /v1/sandboxes/{id}) and body.
	method, path, body func(sb *runSandbox, key string) string
	// check reads the answer.
	check func(t *testing.T, sb *runSandbox, a answer)
}

// runSandbox is one sandbox of the failover run.
type runSandbox struct {
	n     int
	id    string
	execs []string // the keys of its commands, in order
	// pause is run before the next command, to keep it in flight.
	pause string
}

func constant(s string) func(*runSandbox, string) string {
	return func(*runSandbox, string) string { return s }
}

// execStep appends its key to the sandbox's log and prints how many
// lines hold it: 1, unless the command ran twice.
func execStep() step {
	return step{name: "exec", before: api.StateRunning, method: constant("POST"),
		path: func(sb *runSandbox, _ string) string { return "/" + sb.id + "/commands?wait=true" },
		body: func(sb *runSandbox, key string) string {
			return fmt.Sprintf(`{"command":"%secho %s >> /workspace/log; grep -cx %s /workspace/log"}`, sb.pause, key, key)
		},
		check: func(t *testing.T, sb *runSandbox, a answer) {
			r := decode[api.CommandResult](t, a)
			if r.Command.State != api.CommandExited || e2etest.ExitCode(r) != 0 || r.Stdout != "1\n" {
				t.Errorf("%s: command %s exit %d stdout %q stderr %q", a.Key, r.Command.State, e2etest.ExitCode(r), r.Stdout, r.Stderr)
			}
			sb.execs = append(sb.execs, a.Key)
		}}
}

func labelStep(n int) step {
	return step{name: fmt.Sprintf("label%d", n), method: constant("PATCH"), path: func(sb *runSandbox, _ string) string { return "/" + sb.id },
		body: func(sb *runSandbox, _ string) string {
			return fmt.Sprintf(`{"labels":{"n":"%d","step":"%d"}}`, sb.n, n)
		},
		check: func(t *testing.T, sb *runSandbox, a answer) {
			if got := decode[api.Sandbox](t, a).Labels["step"]; got != fmt.Sprint(n) {
				t.Errorf("%s: labels step %q, want %d", a.Key, got, n)
			}
		}}
}

// transition is a sleep or a wake: it answers as the sandbox begins it
// (during) or, when it was quick, has ended it (after).
func transition(name string, before, during, after api.SandboxState) step {
	return step{name: name, before: before, method: constant("POST"), path: func(sb *runSandbox, _ string) string { return "/" + sb.id + "/" + name },
		body: constant(""),
		check: func(t *testing.T, sb *runSandbox, a answer) {
			if got := decode[api.Sandbox](t, a).State; got != during && got != after {
				t.Errorf("%s: %s answered state %s", a.Key, name, got)
			}
		}}
}

// TestFailover sends 67 mutations with Idempotency-Keys (create, exec,
// PATCH, sleep, wake, terminate), alternating between two replicas and
// failing over on a transport error, while the leader is killed with
// SIGKILL twice, each time in the middle of a mutation sent to it; then
// every 2xx answer has its effect, each command ran once, the nodes hold
// what was placed on them, a replay of every key answers the same and
// does nothing, the other replica took the lease within seconds, and the
// singletons (budgets, idle sleeps, webhooks) carry on under it.
func TestFailover(t *testing.T) {
	f, _ := startFleet(t)
	c := newClient(t, f, f.Control.AdminKey)
	run := e2etest.RunID()

	hook := newReceiver(t)
	// Without a key: its answer holds the secret, which a replay leaves out.
	wh := c.must("", "POST", "/v1/webhooks", "", fmt.Sprintf(`{"url":%q}`, hook.URL))
	if wh.Status != http.StatusCreated {
		t.Fatalf("webhook: %s", wh)
	}

	steps := []step{
		{name: "create", method: constant("POST"), path: constant("?wait=running"),
			body: func(sb *runSandbox, _ string) string {
				return fmt.Sprintf(`{"name":"fo-%s-%d","labels":{"n":"%d"}}`, run, sb.n, sb.n)
			},
			check: func(t *testing.T, sb *runSandbox, a answer) {
				got := decode[api.Sandbox](t, a)
				if got.State != api.StateRunning || got.ID == "" {
					t.Fatalf("%s: created %s %s", a.Key, got.ID, got.State)
				}
				sb.id = got.ID
			}},
		execStep(),
		labelStep(2),
		execStep(),
		transition("sleep", api.StateRunning, api.StateSleeping, api.StateAsleep),
		labelStep(5), // stored while it sleeps
		transition("wake", api.StateAsleep, api.StateWaking, api.StateRunning),
		execStep(),
		{name: "network", method: constant("PATCH"), path: func(sb *runSandbox, _ string) string { return "/" + sb.id },
			body: func(sb *runSandbox, _ string) string {
				return fmt.Sprintf(`{"network":{"allow":["h%d.example.com"]}}`, sb.n)
			},
			check: func(t *testing.T, sb *runSandbox, a answer) {
				if got := decode[api.Sandbox](t, a).Network.Allow; !slices.Equal(got, []string{fmt.Sprintf("h%d.example.com", sb.n)}) {
					t.Errorf("%s: network %v", a.Key, got)
				}
			}},
		execStep(),
		transition("sleep", api.StateRunning, api.StateSleeping, api.StateAsleep),
		transition("wake", api.StateAsleep, api.StateWaking, api.StateRunning),
	}
	const sandboxes = 5
	sbs := make([]*runSandbox, sandboxes)
	for i := range sbs {
		sbs[i] = &runSandbox{n: i}
	}
	// The leader dies twice: first while a command of the third sandbox
	// runs through it (a two-second one), then while the sleep of the
	// third sandbox is in flight to it and those of the first two may be
	// under way there. Each time it comes back some mutations later.
	kills := map[int]int{3*sandboxes + 2: 6 * sandboxes, 10*sandboxes + 2: len(steps) * sandboxes}
	var killed []*e2etest.Server
	var tookLease []time.Duration
	var mu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	restart := func() {
		wg.Wait()
		for _, k := range killed {
			if k.PID() == 0 {
				k.Start()
			}
		}
	}
	i := 0
	// The mutation after a kill waits for it: sent to the leader in the
	// moment before it dies, a wake would be cut short (the next leader
	// finishes it, but only once: a second cut ends asleep).
	var pendingKill chan struct{}
	for si, st := range steps {
		for _, sb := range sbs {
			if pendingKill != nil {
				<-pendingKill
				pendingKill = nil
			}
			if st.before != "" && sb.id != "" {
				c.waitState(sb.id, st.before)
			}
			key := fmt.Sprintf("%s-%d-%d-%s", run, sb.n, si, st.name)
			first := ""
			sb.pause = ""
			if _, ok := kills[i]; ok {
				leader, _ := f.WaitLeader(30 * time.Second)
				killed, first, sb.pause = append(killed, leader), leader.URL, "sleep 2; "
				t.Logf("killing the leader %s during mutation %d (%s)", leader.URL, i, key)
				killedCh := make(chan struct{})
				pendingKill = killedCh
				wg.Go(func() {
					time.Sleep(300 * time.Millisecond)
					killedAt := time.Now()
					f.Kill(leader)
					close(killedCh)
					other := f.Other(leader)
					// The other replica takes the lease: poll it alone.
					took := time.Duration(-1)
					for time.Since(killedAt) < time.Minute {
						if h, err := other.Health(); err == nil && h.Leader {
							took = time.Since(killedAt)
							break
						}
						time.Sleep(50 * time.Millisecond)
					}
					mu.Lock()
					tookLease = append(tookLease, took)
					mu.Unlock()
				})
			}
			for _, back := range kills {
				if i == back {
					restart()
				}
			}
			path := "/v1/sandboxes" + st.path(sb, key)
			a := c.do(first, st.method(sb, key), path, key, st.body(sb, key))
			if !a.ok() {
				t.Fatalf("%s", a)
			}
			st.check(t, sb, a)
			i++
		}
	}
	restart()
	t.Logf("%d mutations, the leader killed during mutations %v; the other took the lease %v later", i, slices.Sorted(maps.Keys(kills)), tookLease)
	for _, took := range tookLease {
		if took < 0 || took > 15*time.Second {
			t.Errorf("the lease moved after %v; want within seconds", took)
		}
	}

	// Every 2xx had its effect: the sandboxes run (woken last) with their
	// last labels and network, on the nodes, and each command ran once,
	// its line kept across two sleeps.
	onNodes := map[string]int{}
	for _, sb := range sbs {
		got := c.waitState(sb.id, api.StateRunning)
		if got.Labels["step"] != "5" || !slices.Equal(got.Network.Allow, []string{fmt.Sprintf("h%d.example.com", sb.n)}) {
			t.Errorf("sandbox %d: labels %v network %v", sb.n, got.Labels, got.Network.Allow)
		}
		// Every replica places it on the same node.
		var where []string
		for _, r := range f.Controls {
			sb, err := r.Admin.GetSandbox(t.Context(), sb.id)
			switch {
			case err != nil:
				t.Fatal(err)
			case sb.Node == nil:
				where = append(where, "")
			default:
				where = append(where, sb.Node.Name)
			}
		}
		if where[0] == "" || slices.ContainsFunc(where, func(n string) bool { return n != where[0] }) {
			t.Errorf("sandbox %d: the replicas place it on %q", sb.n, where)
		}
		for _, n := range where {
			if n != "" {
				onNodes[n]++
				break
			}
		}
		log := e2etest.MustOK(t, f.Running().Admin, sb.id, "cat /workspace/log")
		if want := strings.Join(sb.execs, "\n") + "\n"; log != want {
			t.Errorf("sandbox %d ran its commands as\n%s\nwant\n%s", sb.n, log, want)
		}
	}
	// The nodes failed over between the replicas (--control lists both)
	// and were never found lost.
	for _, n := range f.ListNodes() {
		if n.State != "ready" {
			t.Errorf("node %s is %s after the kills", n.Name, n.State)
		}
	}
	for _, sb := range sbs {
		for _, e := range c.events(sb.id, "sandbox.failed") {
			t.Errorf("sandbox %d failed: %+v", sb.n, e.Data)
		}
	}
	// A replica that starts again self-tests its template in a sandbox
	// of its own for a moment: wait for the count to settle.
	waitFor(t, time.Minute, "each node holds the sandboxes placed on it, once", func() (bool, string) {
		var last []string
		for _, n := range f.ListNodes() {
			if n.Sandboxes != onNodes[n.Name] {
				var held []string
				dirs, _ := os.ReadDir(filepath.Join(f.Node(n.Name).DataDir, "sandboxes"))
				for _, d := range dirs {
					// What the control plane says of it.
					what := "unknown"
					if a, err := c.send(f.Running().URL, "GET", "/v1/sandboxes/"+d.Name(), "", ""); err == nil {
						sb := decode[api.Sandbox](t, a)
						what = fmt.Sprintf("%d %s %s", a.Status, sb.State, sb.Name)
						if sb.Node != nil {
							what += " on " + sb.Node.Name
						}
					}
					held = append(held, d.Name()+" ("+what+")")
				}
				last = append(last, fmt.Sprintf("node %s holds %d sandboxes %v, the control plane placed %d there", n.Name, n.Sandboxes, held, onNodes[n.Name]))
			}
		}
		return len(last) == 0, strings.Join(last, "; ")
	})

	// A replay of every key, on the replica that did not answer, answers
	// the same and changes nothing.
	before := len(listSandboxes(t, c))
	checkReplays(t, f, c)
	if after := len(listSandboxes(t, c)); after != before {
		t.Errorf("%d sandboxes after the replays, %d before", after, before)
	}
	for _, sb := range sbs {
		if log := e2etest.MustOK(t, f.Running().Admin, sb.id, "cat /workspace/log"); log != strings.Join(sb.execs, "\n")+"\n" {
			t.Errorf("sandbox %d after the replays: %q", sb.n, log)
		}
	}

	// The singletons carry on under the lease's new holder: an idle
	// sandbox sleeps, a sandbox past its spend limit sleeps, and the
	// webhook gets every event.
	idle := c.must("", "POST", "/v1/sandboxes?wait=running", "idle-"+run, `{"idle_timeout_s":2}`)
	limit := c.must("", "POST", "/v1/sandboxes?wait=running", "budget-"+run, `{"spend_limit_usd":0.002}`)
	idleID, limitID := decode[api.Sandbox](t, idle).ID, decode[api.Sandbox](t, limit).ID
	c.waitState(idleID, api.StateAsleep)
	if got := c.waitState(limitID, api.StateAsleep); len(c.events(limitID, "budget.exceeded")) == 0 {
		t.Errorf("the sandbox past its limit is asleep (%s) without budget.exceeded", got.StateReason)
	}
	if len(c.events(idleID, "sandbox.idle")) == 0 {
		t.Error("the idle sandbox slept without sandbox.idle")
	}

	// The last mutations: terminate them all.
	for _, sb := range sbs {
		c.must("", "DELETE", "/v1/sandboxes/"+sb.id, fmt.Sprintf("%s-%d-terminate", run, sb.n), "")
	}
	for _, sb := range sbs {
		c.waitState(sb.id, api.StateTerminated)
	}
	var all []api.Event
	for _, sb := range sbs {
		all = append(all, c.events(sb.id)...)
	}
	all = append(all, c.events(idleID)...)
	all = append(all, c.events(limitID)...)
	waitFor(t, time.Minute, "the webhook gets every event", func() (bool, string) {
		m := hook.missing(all)
		return len(m) == 0, fmt.Sprintf("%d of %d missing: %v", len(m), len(all), m)
	})
}

// listSandboxes lists every sandbox of the client's team.
func listSandboxes(t *testing.T, c *client) []api.Sandbox {
	t.Helper()
	a := c.must("", "GET", "/v1/sandboxes?limit=1000", "", "")
	return decode[api.List[api.Sandbox]](t, a).Items
}

// checkReplays replays every request the client made with a key, on a
// replica other than the one that answered it, and checks that the
// answer is the same, replayed.
func checkReplays(t *testing.T, f *e2etest.Fleet, c *client) {
	t.Helper()
	c.mu.Lock()
	answers := slices.Clone(c.answers)
	c.mu.Unlock()
	for _, a := range answers {
		other := f.Controls[0].URL
		if a.By == other {
			other = f.Controls[1].URL
		}
		r, err := c.send(other, a.Method, a.Path, a.Key, a.Body)
		for tries := 0; err == nil && r.Status == http.StatusConflict && r.RetryAfter != "" && tries < 10; tries++ {
			// The answer was being stored when the replay came: as
			// docs/api.md says, its Retry-After brings the answer.
			time.Sleep(time.Second)
			r, err = c.send(other, a.Method, a.Path, a.Key, a.Body)
		}
		if err != nil {
			t.Fatalf("replay of %s: %v", a.Key, err)
		}
		if r.Status != a.Status || !bytes.Equal(r.Resp, a.Resp) || !r.Replayed {
			t.Errorf("replay of %s: %d (replayed %v) %s\nfirst: %s", a.Key, r.Status, r.Replayed, bytes.TrimSpace(r.Resp), a)
		}
	}
}
