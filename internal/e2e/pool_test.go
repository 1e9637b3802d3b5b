package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// waitWarm waits until the server's warm pool holds n ready sandboxes, as
// /healthz reports.
func waitWarm(t *testing.T, s *e2etest.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var h struct {
			WarmPool struct{ Ready, Target int } `json:"warm_pool"`
		}
		status, _, body := e2etest.RawRequest(t, "GET", s.URL+"/healthz", "", "")
		if status != 200 || json.Unmarshal(body, &h) != nil {
			t.Fatalf("healthz: %d %s", status, body)
		}
		if h.WarmPool.Ready >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm pool did not fill: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWarmPool(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "1"))
	ctx := t.Context()
	waitWarm(t, s, 1)
	// A request that fits is served from the pool: running at once, with
	// its own name as hostname.
	sb, err := s.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "warmy", Env: map[string]string{"A": "b"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != api.StateRunning {
		t.Fatalf("a fitting create is %s, want running at once from the pool", sb.State)
	}
	if out := e2etest.MustOK(t, s.Admin, "warmy", "hostname; echo $A; cat /etc/hostname"); !strings.HasPrefix(out, "warmy\nb\n") {
		t.Errorf("warm sandbox: %q", out)
	}
	evs := events(t, s, "sandbox="+sb.ID+"&type=sandbox.creating")
	if len(evs) != 1 || evs[0].Data["warm"] != true {
		t.Errorf("creating event: %+v", evs)
	}
	// The pool fills again; a request that does not fit starts cold.
	waitWarm(t, s, 1)
	mem := int64(256)
	cold, err := s.Admin.CreateSandbox(ctx, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{MemoryMiB: &mem}}, false)
	if err != nil || cold.State != api.StateCreating {
		t.Fatalf("a create that does not fit: %s %v", cold.State, err)
	}
	// Terminating a warm sandbox leaves nothing, as any other.
	if _, err := s.Admin.TerminateSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	s.Admin.WaitSandbox(ctx, sb.ID, api.StateTerminated, time.Minute)
	if left := settledLeftovers(t, s, sb.ID); len(left) > 0 {
		t.Errorf("left:\n%s", strings.Join(left, "\n"))
	}
	// A graceful stop removes the pool's sandboxes.
	s.TerminateAll()
	s.Stop(syscall.SIGTERM)
	if dirs, _ := filepath.Glob(filepath.Join(s.DataDir, "sandboxes", "sbx_*")); len(dirs) != 0 {
		t.Errorf("after a graceful stop, state dirs remain: %v", dirs)
	}
}
