package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// TestCrashAtRandomPoints kills `cove serve` with SIGKILL at a random moment
// while clients create, run commands, write files, sleep, wake and
// terminate sandboxes, restarts it, and checks the invariants: every
// sandbox settles in a consistent state, nothing runs or is mounted that
// the store does not know, and no acknowledged file write is lost.
func TestCrashAtRandomPoints(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	t.Logf("seed %d", seed)

	// acked[sandbox][path] is the content of the last write the server
	// acknowledged.
	var mu sync.Mutex
	acked := map[string]map[string]string{}
	ack := func(id, p, content string) {
		mu.Lock()
		defer mu.Unlock()
		if acked[id] == nil {
			acked[id] = map[string]string{}
		}
		acked[id][p] = content
	}
	terminated := map[string]bool{}

	for round := range 4 {
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		// Some sandboxes to act on, made before the storm.
		var ids []string
		for range 3 {
			sb, err := s.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{}, true)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, sb.ID)
		}
		for w := range 6 {
			wg.Go(func() {
				for n := 0; ctx.Err() == nil; n++ {
					id := ids[(w+n)%len(ids)]
					switch (w + n) % 6 {
					case 0:
						s.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{}, false)
					case 1:
						s.Admin.Exec(ctx, id, api.CreateCommandRequest{Command: "echo hi; sleep 0.2"})
					case 2, 3:
						p := fmt.Sprintf("/workspace/r%d-w%d-n%d", round, w, n)
						content := fmt.Sprintf("round %d worker %d write %d", round, w, n)
						if _, err := s.Admin.WriteFile(ctx, id, p, strings.NewReader(content), cove.NoWake()); err == nil {
							ack(id, p, content)
						}
					case 4:
						if w == 4 {
							s.Admin.SleepSandbox(ctx, id)
						} else {
							s.Admin.WakeSandbox(ctx, id)
						}
					case 5:
						if w == 5 && n%3 == 2 {
							if _, err := s.Admin.TerminateSandbox(ctx, id); err == nil {
								mu.Lock()
								terminated[id] = true
								mu.Unlock()
							}
						}
					}
				}
			})
		}
		time.Sleep(time.Duration(50+rng.IntN(600)) * time.Millisecond)
		s.Stop(syscall.SIGKILL)
		cancel()
		wg.Wait()
		s.Start()
		checkInvariants(t, s, fmt.Sprintf("round %d", round))
	}

	// No acknowledged write is lost: in every sandbox that was not
	// terminated, each acknowledged file holds what was written.
	ctx := t.Context()
	checked := 0
	defer func() { t.Logf("%d acknowledged writes checked in %d sandboxes", checked, len(acked)) }()
	for id, files := range acked {
		if terminated[id] {
			continue
		}
		sb, err := s.Admin.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == api.StateTerminated || (sb.State == api.StateFailed && strings.Contains(sb.StateReason, "terminate")) {
			continue
		}
		if sb.State == api.StateFailed {
			t.Errorf("%s failed (%s) with acknowledged writes in it", id, sb.StateReason)
			continue
		}
		for p, want := range files {
			var got bytes.Buffer
			checked++
			if _, err := s.Admin.DownloadFile(ctx, id, p, &got); err != nil || got.String() != want {
				t.Errorf("%s:%s = %q (%v), want the acknowledged %q", id, p, got.String(), err, want)
			}
		}
	}
}

// checkInvariants waits until every sandbox has settled and checks that the
// node holds exactly what the store says runs.
func checkInvariants(t *testing.T, s *e2etest.Server, when string) {
	t.Helper()
	ctx := t.Context()
	deadline := time.Now().Add(2 * time.Minute)
	var all []api.Sandbox
	for {
		page, err := s.Admin.ListSandboxes(ctx, cove.SandboxQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		all = page.Items
		settled := true
		for _, sb := range all {
			switch sb.State {
			case api.StateRunning, api.StateAsleep, api.StateTerminated:
			case api.StateFailed:
				if sb.StateReason == "" {
					t.Errorf("%s: %s failed without a reason", when, sb.ID)
				}
			default:
				settled = false
			}
		}
		if settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: sandboxes did not settle: %+v", when, states(all))
		}
		time.Sleep(100 * time.Millisecond)
	}
	running := map[string]bool{}
	for _, sb := range all {
		if sb.State == api.StateRunning {
			running[sb.ID] = true
			continue
		}
		allowed := []string{}
		if sb.State == api.StateAsleep {
			allowed = append(allowed, filepath.Join(s.DataDir, "output", sb.ID))
		}
		if left := settledLeftovers(t, s, sb.ID, allowed...); len(left) > 0 {
			t.Errorf("%s: %s is %s, yet on the node:\n%s", when, sb.ID, sb.State, strings.Join(left, "\n"))
		}
	}
	// Nothing runs that the store does not know as running.
	if out, err := runOut("runc", "--root", filepath.Join(s.DataDir, "runc"), "list", "-q"); err == nil {
		for _, id := range strings.Fields(out) {
			if !running[id] {
				t.Errorf("%s: runc runs %s, which the store does not know as running", when, id)
			}
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(s.DataDir, "sandboxes", "sbx_*"))
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() && !running[filepath.Base(d)] {
			t.Errorf("%s: state dir %s of a sandbox that is not running", when, d)
		}
	}
}

func states(sbs []api.Sandbox) map[string]api.SandboxState {
	m := map[string]api.SandboxState{}
	for _, sb := range sbs {
		m[sb.ID] = sb.State
	}
	return m
}
