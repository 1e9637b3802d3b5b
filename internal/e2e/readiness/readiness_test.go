// Package readiness runs `cove serve` and checks GET /readyz against the
// real node (runc, the fence's nftables table, the data disk, the store),
// and that sandboxes' processes start with default signal dispositions
// whatever `cove serve` inherited.
package readiness

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

type readyAnswer struct {
	Ready   bool     `json:"ready"`
	Failing []string `json:"failing"`
	Checks  map[string]struct {
		OK     bool   `json:"ok"`
		Detail string `json:"detail"`
		Error  string `json:"error"`
	} `json:"checks"`
}

func readyz(t *testing.T, s *e2etest.Server) (int, readyAnswer) {
	t.Helper()
	resp, err := http.Get(s.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var a readyAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("GET /readyz %d: %v: %s", resp.StatusCode, err, b)
	}
	return resp.StatusCode, a
}

// TestReadyzFence: a running server is ready on every check; with its
// fence's table deleted behind its back it answers 503 naming the fence
// (and only the fence), and a restart, which installs the table again,
// makes it ready again.
func TestReadyzFence(t *testing.T) {
	s := e2etest.StartServer(t)
	code, a := readyz(t, s)
	if code != http.StatusOK || !a.Ready {
		t.Fatalf("GET /readyz on a running server: %d %+v", code, a)
	}
	for _, name := range []string{"store", "templates", "runc", "fence", "disk"} {
		if c, ok := a.Checks[name]; !ok || !c.OK {
			t.Errorf("check %s: %+v (present %v)", name, c, ok)
		}
	}
	if out, err := exec.Command("nft", "delete", "table", "inet", s.Table).CombinedOutput(); err != nil {
		t.Fatalf("nft delete table: %v: %s", err, out)
	}
	code, a = readyz(t, s)
	if code != http.StatusServiceUnavailable || a.Ready || strings.Join(a.Failing, ",") != "fence" {
		t.Fatalf("GET /readyz without the fence's table: %d %+v; want 503 failing [fence]", code, a)
	}
	if e := a.Checks["fence"].Error; !strings.Contains(e, s.Table) {
		t.Errorf("fence error %q does not name the table %s", e, s.Table)
	}
	// It does not put the table back by itself: still unready.
	if code, _ = readyz(t, s); code != http.StatusServiceUnavailable {
		t.Fatalf("GET /readyz again: %d", code)
	}
	s.Stop(syscall.SIGTERM)
	s.Start()
	if code, a = readyz(t, s); code != http.StatusOK || !a.Ready {
		t.Fatalf("GET /readyz after a restart: %d %+v", code, a)
	}
}

// TestSignalsIgnoredAtStart: `cove serve` started with SIGHUP and SIGPIPE
// ignored (nohup, systemd's IgnoreSIGPIPE) starts sandbox commands with
// no signal ignored or blocked.
func TestSignalsIgnoredAtStart(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithIgnoredSignals("HUP PIPE"))
	// The server itself did inherit them.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.PID()))
	if err != nil {
		t.Fatal(err)
	}
	st := string(b)
	if !strings.Contains(st, "SigIgn:\t") || strings.Contains(st, "SigIgn:\t0000000000000000") {
		t.Fatalf("cove serve ignores no signal; the wrapper did not work:\n%s", st)
	}
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	// The test image's shell (busybox sh) ignores SIGQUIT itself in the
	// commands it runs, so only what cove serve inherited is checked in
	// SigIgn: SIGHUP (bit 0) and SIGPIPE (bit 12); the mask is empty.
	out := e2etest.MustOK(t, s.Admin, sb.ID, "cat /proc/self/status")
	var ign, blk uint64
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:\t"); ok {
			ign, _ = strconv.ParseUint(v, 16, 64)
		}
		if v, ok := strings.CutPrefix(line, "SigBlk:\t"); ok {
			blk, err = strconv.ParseUint(v, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if ign&(1<<(syscall.SIGHUP-1)|1<<(syscall.SIGPIPE-1)) != 0 || blk != 0 {
		t.Errorf("a sandbox command ignores %#x, blocks %#x:\n%s", ign, blk, out)
	}
	if out := e2etest.MustOK(t, s.Admin, sb.ID, "sh -c 'kill -HUP $$; sleep 5'; echo status=$?"); strings.TrimSpace(out) != "status=129" {
		t.Errorf("kill -HUP: %q; want status=129", out)
	}
	res := e2etest.Sh(t, s.Admin, sb.ID, "yes | head -1", e2etest.WithTimeout(30))
	if e2etest.ExitCode(res) != 0 || strings.TrimSpace(res.Stdout) != "y" {
		t.Errorf("yes | head -1: state %s exit %d stdout %q", res.Command.State, e2etest.ExitCode(res), res.Stdout)
	}
}
