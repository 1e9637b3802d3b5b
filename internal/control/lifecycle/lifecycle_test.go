package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

// The sandbox life cycle over the real SQLite store and the fake node, in
// a synctest bubble: the server's clock and tickers are the bubble's, so
// idle and lifetime limits pass without sleeping on the wall clock.

// started is a harness whose server runs its background work (limits,
// queue, pool), stopped at cleanup.
func started(t *testing.T, edit func(*lifecycle.Config)) *harness {
	t.Helper()
	h := newHarnessWith(t, edit)
	h.srv.Start()
	return h
}

func i64(v int64) *int64 { return &v }

// TestLimits: a running sandbox is slept or terminated by its idle
// timeout and terminated at its max lifetime, and not before.
func TestLimits(t *testing.T) {
	tests := []struct {
		name  string
		req   api.CreateSandboxRequest
		early time.Duration // still running after this long
		late  time.Duration // in want after this long
		want  api.SandboxState
	}{
		{"idle sleeps", api.CreateSandboxRequest{IdleTimeoutS: i64(60)}, 50 * time.Second, 70 * time.Second, api.StateAsleep},
		{"idle terminates", api.CreateSandboxRequest{IdleTimeoutS: i64(60), OnIdle: "terminate"}, 50 * time.Second, 70 * time.Second, api.StateTerminated},
		{"lifetime terminates", api.CreateSandboxRequest{MaxLifetimeS: i64(120)}, 110 * time.Second, 130 * time.Second, api.StateTerminated},
		{"no limits", api.CreateSandboxRequest{}, 10 * time.Minute, 20 * time.Minute, api.StateRunning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := started(t, func(c *lifecycle.Config) { c.LimitsInterval = time.Second })
				sb, err := h.srv.CreateSandbox(t.Context(), h.a, tt.req)
				if err != nil {
					t.Fatal(err)
				}
				h.wait(t, h.a, sb.ID, api.StateRunning)
				time.Sleep(tt.early)
				synctest.Wait()
				if got := h.get(t, sb.ID); got.State != api.StateRunning {
					t.Fatalf("after %s the sandbox is %s (%s), want running", tt.early, got.State, got.StateReason)
				}
				time.Sleep(tt.late - tt.early)
				synctest.Wait()
				if got := h.get(t, sb.ID); got.State != tt.want {
					t.Fatalf("after %s the sandbox is %s (%s), want %s", tt.late, got.State, got.StateReason, tt.want)
				}
			})
		})
	}
}

// TestActivityDefersIdle: a command run in the sandbox counts as
// activity, so the idle timeout counts from it.
func TestActivityDefersIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := started(t, func(c *lifecycle.Config) { c.LimitsInterval = time.Second })
		sb, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{IdleTimeoutS: i64(60)})
		if err != nil {
			t.Fatal(err)
		}
		h.wait(t, h.a, sb.ID, api.StateRunning)
		time.Sleep(50 * time.Second)
		if _, err := h.plane.Commands.Exec(t.Context(), h.a, sb.ID, true, api.CreateCommandRequest{Command: "true"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Second) // 100 s after create, 50 s after the command
		synctest.Wait()
		if got := h.get(t, sb.ID); got.State != api.StateRunning {
			t.Fatalf("50 s after a command the sandbox is %s (%s), want running", got.State, got.StateReason)
		}
	})
}

// TestSetupOutcome: a sandbox runs once its setup exits 0; a setup that
// fails or times out fails the sandbox with a reason that says so.
func TestSetupOutcome(t *testing.T) {
	tests := []struct {
		name   string
		exit   node.Exit
		want   api.SandboxState
		reason string
	}{
		{"exit 0", node.Exit{}, api.StateRunning, ""},
		{"exit 3", node.Exit{ExitCode: 3}, api.StateFailed, "exited with code 3"},
		{"timed out", node.Exit{ExitCode: -1, Signal: "KILL", TimedOut: true}, api.StateFailed, "timed out after 30 s"},
		{"killed", node.Exit{ExitCode: -1, Signal: "TERM"}, api.StateFailed, "killed by SIGTERM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t)
				var setupPolicy bool
				h.node.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
					sb, _ := h.node.Sandbox(strings.TrimSpace(spec.Env["COVE_SANDBOX_ID"]))
					setupPolicy = sb.InSetup
					return tt.exit
				}
				sb, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{
					Setup: &api.Setup{Command: "make", TimeoutS: 30, Network: &api.NetworkPolicy{Allow: []string{"example.com"}}},
				})
				if err != nil {
					t.Fatal(err)
				}
				got := h.wait(t, h.a, sb.ID, tt.want)
				if !strings.Contains(got.StateReason, tt.reason) {
					t.Errorf("state reason %q, want it to say %q", got.StateReason, tt.reason)
				}
				if !setupPolicy {
					t.Error("the setup ran without its setup network policy")
				}
				if got.SetupCommandID == "" {
					t.Error("the sandbox does not name its setup command")
				}
			})
		})
	}
}

// TestSleepWake: a sleeping sandbox's files are saved and its runtime
// removed; a wake restores it, running again.
func TestSleepWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		sb := h.running(t, h.a, "web")
		if _, err := h.srv.SleepSandbox(t.Context(), h.a, sb.ID, "test"); err != nil {
			t.Fatal(err)
		}
		h.wait(t, h.a, sb.ID, api.StateAsleep)
		if n, _ := h.node.Sandbox(sb.ID); n.State != nodetest.Saved {
			t.Fatalf("asleep sandbox is %q on the node, want saved", n.State)
		}
		if _, err := h.plane.Commands.Exec(t.Context(), h.a, sb.ID, false, api.CreateCommandRequest{Command: "true"}); api.ErrorCode(err) != api.CodeConflict {
			t.Fatalf("exec with wake=false in an asleep sandbox: %v, want conflict", err)
		}
		if got := h.get(t, sb.ID); got.State != api.StateAsleep {
			t.Fatalf("after a refused exec the sandbox is %s, want asleep", got.State)
		}
		if _, err := h.srv.WakeSandbox(t.Context(), h.a, sb.ID); err != nil {
			t.Fatal(err)
		}
		h.wait(t, h.a, sb.ID, api.StateRunning)
		if n, _ := h.node.Sandbox(sb.ID); n.State != nodetest.Running {
			t.Fatalf("woken sandbox is %q on the node, want running", n.State)
		}
	})
}

// TestExecWakes: a command sent to an asleep sandbox wakes it (through
// the wake: its events are a wake's) and runs once it is running; one
// sent while the sandbox is sleeping waits for the sleep to end, then
// wakes it, in that order; within a timeout_s shorter than the sleep it
// gives up with a conflict, the sleep going on; a wake that fails is the
// answer, the sandbox staying asleep.
func TestExecWakes(t *testing.T) {
	t.Run("asleep", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t)
			sb := h.running(t, h.a, "web")
			if _, err := h.srv.SleepSandbox(t.Context(), h.a, sb.ID, "test"); err != nil {
				t.Fatal(err)
			}
			h.wait(t, h.a, sb.ID, api.StateAsleep)
			c, err := h.plane.Commands.Exec(t.Context(), h.a, sb.ID, true, api.CreateCommandRequest{Command: "true"})
			if err != nil {
				t.Fatalf("exec in an asleep sandbox: %v", err)
			}
			if c.SandboxID != sb.ID {
				t.Fatalf("the command ran in %s", c.SandboxID)
			}
			if got := h.get(t, sb.ID); got.State != api.StateRunning {
				t.Fatalf("after the exec the sandbox is %s, want running", got.State)
			}
			synctest.Wait()
			ev := h.events(t, h.a, sb.ID)
			for _, want := range [][]string{{"sandbox.asleep", "sandbox.waking", "command.started"}, {"sandbox.waking", "sandbox.running"}} {
				if !inOrder(ev, want...) {
					t.Errorf("events %v; want %v in that order", ev, want)
				}
			}
		})
	})
	t.Run("sleeping", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t)
			sb := h.running(t, h.a, "web")
			h.node.SleepGate = make(chan struct{})
			if _, err := h.srv.SleepSandbox(t.Context(), h.a, sb.ID, "test"); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := h.plane.Commands.Exec(t.Context(), h.a, sb.ID, true, api.CreateCommandRequest{Command: "true"})
				done <- err
			}()
			synctest.Wait()
			if got := h.get(t, sb.ID); got.State != api.StateSleeping {
				t.Fatalf("while the sleep is held the sandbox is %s, want sleeping", got.State)
			}
			select {
			case err := <-done:
				t.Fatalf("the exec answered during the sleep: %v", err)
			default:
			}
			close(h.node.SleepGate)
			if err := <-done; err != nil {
				t.Fatalf("exec sent while sleeping: %v", err)
			}
			if got := h.get(t, sb.ID); got.State != api.StateRunning {
				t.Fatalf("after the exec the sandbox is %s, want running", got.State)
			}
			synctest.Wait()
			ev := h.events(t, h.a, sb.ID)
			for _, want := range [][]string{{"sandbox.sleeping", "sandbox.asleep", "sandbox.waking", "command.started"}, {"sandbox.waking", "sandbox.running"}} {
				if !inOrder(ev, want...) {
					t.Errorf("events %v; want %v in that order", ev, want)
				}
			}
		})
	})
	t.Run("sleeping past timeout_s", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t)
			sb := h.running(t, h.a, "web")
			h.node.SleepGate = make(chan struct{})
			defer close(h.node.SleepGate)
			if _, err := h.srv.SleepSandbox(t.Context(), h.a, sb.ID, "test"); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err := h.plane.Commands.Exec(t.Context(), h.a, sb.ID, true, api.CreateCommandRequest{Command: "true", TimeoutS: ptr[int64](5)})
			if api.ErrorCode(err) != api.CodeConflict || !strings.Contains(err.Error(), "still sleeping") {
				t.Fatalf("exec held past its timeout: %v, want a conflict saying it is still sleeping", err)
			}
			if waited := time.Since(start); waited != 5*time.Second {
				t.Errorf("the exec waited %v, want its timeout_s of 5 s", waited)
			}
		})
	})
	t.Run("wake fails", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t)
			sb := h.running(t, h.a, "web")
			if _, err := h.srv.SleepSandbox(t.Context(), h.a, sb.ID, "test"); err != nil {
				t.Fatal(err)
			}
			h.wait(t, h.a, sb.ID, api.StateAsleep)
			h.node.Fail("wake", errors.New("no room"))
			_, err := h.plane.Commands.Exec(t.Context(), h.a, sb.ID, true, api.CreateCommandRequest{Command: "true"})
			if api.ErrorCode(err) != api.CodeConflict || !strings.Contains(err.Error(), "could not wake") {
				t.Fatalf("exec whose wake fails: %v, want a conflict saying it could not wake", err)
			}
			if got := h.get(t, sb.ID); got.State != api.StateAsleep {
				t.Fatalf("after a failed wake the sandbox is %s, want asleep", got.State)
			}
		})
	})
}

// inOrder says whether want occur in events in that order, each after
// the one before (others may come between). A command's start is only
// ordered after the wake's start: sandbox.running is appended just after
// the state is stored, which the command may already have seen.
func inOrder(events []string, want ...string) bool {
	i := 0
	for _, e := range events {
		if i < len(want) && e == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestWarmPool: a create that fits the pool takes a pooled sandbox (its
// ID, already started) and the pool fills again.
func TestWarmPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := started(t, func(c *lifecycle.Config) { c.WarmPool = 1; c.DefaultTemplate = "managed" })
		synctest.Wait()
		if ready, target := h.srv.WarmPool(); ready != 1 || target != 1 {
			t.Fatalf("pool %d of %d, want 1 of 1", ready, target)
		}
		known, _ := h.node.Known(t.Context())
		sb, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(known) != 1 || sb.ID != known[0] {
			t.Fatalf("created %s, want the pooled %v", sb.ID, known)
		}
		h.wait(t, h.a, sb.ID, api.StateRunning)
		synctest.Wait()
		// The refill waits a moment, while the sandbox handed out runs
		// its first commands, then starts.
		if known, _ = h.node.Known(t.Context()); len(known) != 1 {
			t.Fatalf("the node has %v at once after a take; want the refill to wait", known)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if ready, _ := h.srv.WarmPool(); ready != 1 {
			t.Fatalf("pool has %d ready a second after a take, want 1 again", ready)
		}
		// One that does not fit (other resources) starts cold.
		cpus := 2.0
		cold, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{CPUs: &cpus}})
		if err != nil {
			t.Fatal(err)
		}
		if ready, _ := h.srv.WarmPool(); ready != 1 || cold.ID == sb.ID {
			t.Fatalf("a create that does not fit took from the pool")
		}
	})
}

// TestWarmPoolSetID: the pool keeps sandboxes with and without SetID
// apart, and a create takes only its own kind: a create through cove's
// API never gets a pooled SetID sandbox, E2B's never a pooled one
// without. The node is told SetID at start and again at wake.
func TestWarmPoolSetID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := started(t, func(c *lifecycle.Config) { c.WarmPool = 1; c.WarmPoolSetID = 1; c.DefaultTemplate = "managed" })
		synctest.Wait()
		if ready, target := h.srv.WarmPool(); ready != 2 || target != 2 {
			t.Fatalf("pool %d of %d, want 2 of 2", ready, target)
		}
		pooled := map[string]bool{}
		taken := map[bool]int{}
		known, _ := h.node.Known(t.Context())
		for _, id := range known {
			sb, _ := h.node.Sandbox(id)
			pooled[id] = sb.Spec.SetID
		}
		for round := range 3 {
			for _, setID := range []bool{false, true, true, false} {
				sb, err := h.srv.CreateSandboxWith(t.Context(), h.a, api.CreateSandboxRequest{}, lifecycle.CreateOptions{SetID: setID})
				if err != nil {
					t.Fatal(err)
				}
				h.wait(t, h.a, sb.ID, api.StateRunning)
				got, _ := h.node.Sandbox(sb.ID)
				if got.Spec.SetID != setID || h.get(t, sb.ID).SetID != setID {
					t.Fatalf("round %d: a create with SetID %v runs with %v (stored %v)", round, setID, got.Spec.SetID, h.get(t, sb.ID).SetID)
				}
				if was, ok := pooled[sb.ID]; ok {
					if was != setID {
						t.Fatalf("round %d: a create with SetID %v took a pooled sandbox with %v", round, setID, was)
					}
					taken[setID]++
				}
				synctest.Wait()
				known, _ := h.node.Known(t.Context())
				for _, id := range known {
					if _, ok := pooled[id]; !ok {
						n, _ := h.node.Sandbox(id)
						pooled[id] = n.Spec.SetID
					}
				}
				if setID {
					if _, err := h.srv.SleepSandbox(t.Context(), h.a, sb.ID, "test"); err != nil {
						t.Fatal(err)
					}
					h.wait(t, h.a, sb.ID, api.StateAsleep)
					if _, err := h.srv.WakeSandbox(t.Context(), h.a, sb.ID); err != nil {
						t.Fatal(err)
					}
					h.wait(t, h.a, sb.ID, api.StateRunning)
					if got, _ := h.node.Sandbox(sb.ID); !got.Spec.SetID {
						t.Fatalf("round %d: woken without SetID", round)
					}
				}
			}
		}
		if taken[false] == 0 || taken[true] == 0 {
			t.Errorf("creates took %v from the pool by SetID; want both kinds taken", taken)
		}
	})
}

func (h *harness) get(t *testing.T, id string) api.Sandbox {
	t.Helper()
	sb, err := h.srv.GetSandbox(context.WithoutCancel(t.Context()), h.a, id)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// TestLifetimeDuringSetup: a sandbox cannot sleep in its setup, so its
// max lifetime reached during setup fails it, saying so.
func TestLifetimeDuringSetup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := started(t, func(c *lifecycle.Config) { c.LimitsInterval = time.Second })
		h.node.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
			<-ctx.Done() // a setup that never ends by itself
			return node.Exit{ExitCode: -1, Signal: "KILL"}
		}
		sb, err := h.srv.CreateSandbox(t.Context(), h.a, api.CreateSandboxRequest{
			MaxLifetimeS: i64(30), Setup: &api.Setup{Command: "sleep infinity", TimeoutS: 600},
		})
		if err != nil {
			t.Fatal(err)
		}
		h.wait(t, h.a, sb.ID, api.StateSettingUp)
		time.Sleep(40 * time.Second)
		synctest.Wait()
		got := h.get(t, sb.ID)
		if got.State != api.StateFailed || !strings.Contains(got.StateReason, "max_lifetime_s (30 s) reached during setup") {
			t.Fatalf("after 40 s it is %s (%q); want failed at its lifetime", got.State, got.StateReason)
		}
	})
}
