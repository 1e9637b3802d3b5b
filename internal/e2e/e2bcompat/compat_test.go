// Package e2bcompat runs programs written for E2B's JavaScript SDK (npm
// e2b, pinned in js/package-lock.json) against a real `cove serve` with
// its E2B listeners, set only by E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY, as docs/e2b.md tells users to.
package e2bcompat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// e2bServer runs a server with its E2B listeners, base standing for the
// managed template.
func e2bServer(t *testing.T) *e2etest.Server {
	return e2etest.StartServer(t, e2etest.WithManaged, e2etest.WithArgs(
		"--e2b-api-listen", "127.0.0.1:0", "--e2b-sandbox-listen", "127.0.0.1:0", "--e2b-template", "base=managed"))
}

// e2bKey makes a team (whose sandboxes the server's cleanup ends) and a
// key of the e2b shape for it.
func e2bKey(t *testing.T, s *e2etest.Server, name string) (*cove.Client, string) {
	t.Helper()
	ctx := context.Background()
	c := s.NewTeam(name)
	teams, err := s.Admin.ListTeams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := ""
	for _, tm := range teams {
		if tm.Name == name {
			id = tm.ID
		}
	}
	k, err := s.Admin.CreateKey(ctx, id, api.CreateKeyRequest{Format: api.KeyFormatE2B})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k.APIKey, "e2b_") {
		t.Fatalf("an e2b key is %q", k.APIKey)
	}
	return c, k.APIKey
}

// program copies js/ to a temporary folder and installs its lock file's
// packages there, so that nothing is written in the tree.
func program(t *testing.T) string {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip("no " + tool)
		}
	}
	dir := filepath.Join(t.TempDir(), "js")
	run(t, "", nil, "cp", "-r", "js", dir)
	os.RemoveAll(filepath.Join(dir, "node_modules"))
	run(t, dir, []string{"npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false"}, "npm", "ci")
	return dir
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// TestE2BSDK runs js/compat.mjs: sandboxes' life cycle, commands, files
// with their metadata (user.e2b.* xattrs on the sandbox's overlay), signed
// download and upload URLs, kill during a stream, and the hostile checks
// (another team's key, an ID without its token, a signature pointed at
// another team's sandbox, trusted.* and security.* xattrs from inside). It also measures create→first command through
// E2B's SDK against cove's own SDK, on the same server.
func TestE2BSDK(t *testing.T) {
	s := e2bServer(t)
	dir := program(t)
	l := s.Listeners()
	own, key := e2bKey(t, s, "e2b-compat")
	_, otherKey := e2bKey(t, s, "e2b-other")
	// Only the three variables of docs/e2b.md (and the other team's key
	// for the hostile checks); whatever E2B_* the environment holds is
	// overridden, and E2B_DEBUG left unset.
	// ESCAPE_NAME is a file the program writes through a symlink to the
	// sandbox's /: it must land in the sandbox's /tmp, never the host's.
	escape := fmt.Sprintf("cove-e2b-escape-%d", time.Now().UnixNano())
	env := []string{
		"E2B_API_URL=http://" + l["e2b-api"], "E2B_SANDBOX_URL=http://" + l["e2b-sandbox"], "E2B_API_KEY=" + key,
		"OTHER_TEAM_KEY=" + otherKey, "E2B_DEBUG=", "E2B_DOMAIN=", "ESCAPE_NAME=" + escape,
	}
	// Both SDKs are timed from a full warm pool, so that each create may
	// be served from it as cove serves its own.
	waitWarmPool(t, s)
	start := time.Now()
	sb := e2etest.Create(t, own, api.CreateSandboxRequest{})
	if r := e2etest.Sh(t, own, sb.ID, "echo first"); r.Stdout != "first\n" {
		t.Fatalf("cove's SDK: %+v", r)
	}
	coveMs := time.Since(start).Milliseconds()
	waitWarmPool(t, s)
	out := run(t, dir, env, "node", "compat.mjs")
	t.Logf("compat.mjs:\n%s", out)
	if _, err := os.Lstat(filepath.Join("/tmp", escape)); !os.IsNotExist(err) {
		t.Errorf("a write through the sandbox's symlink to / reached the host's /tmp/%s: %v", escape, err)
	}
	var res struct {
		Timings struct {
			CreateToFirstCommandMs int64 `json:"createToFirstCommandMs"`
		} `json:"timings"`
	}
	last := out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]
	if err := json.Unmarshal([]byte(last), &res); err != nil || res.Timings.CreateToFirstCommandMs == 0 {
		t.Fatalf("no timings in the last line %q: %v", last, err)
	}
	t.Logf("create→first command: E2B's SDK %d ms, cove's own Go SDK %d ms", res.Timings.CreateToFirstCommandMs, coveMs)
}

// waitWarmPool waits, with a bound, until the server's warm pool is full.
func waitWarmPool(t *testing.T, s *e2etest.Server) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var h struct {
			WarmPool struct{ Ready, Target int } `json:"warm_pool"`
		}
		resp, err := http.Get(s.URL + "/healthz")
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if h.WarmPool.Ready >= h.WarmPool.Target {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the warm pool did not fill in 2 minutes")
}

// TestSandboxCannotReachE2BListeners: a sandbox reaches neither E2B
// listener, at the host's side of its link nor at loopback (its own). A
// TCP connection alone proves nothing (the gateway takes every
// connection and then refuses it), so the check is for the listener's own
// answer, which the host gets.
func TestSandboxCannotReachE2BListeners(t *testing.T) {
	s := e2bServer(t)
	c, _ := e2bKey(t, s, "e2b-hostile")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	hostSide := strings.TrimSuffix(s.Subnet, "0/24") + "1"
	for name, mark := range map[string]string{"e2b-api": "X-API-Key", "e2b-sandbox": "E2b-Sandbox-Id"} {
		_, port, err := net.SplitHostPort(s.Listeners()[name])
		if err != nil {
			t.Fatal(err)
		}
		probe := "curl -sS --max-time 4 http://%s:%s/health 2>&1; true"
		if out := run(t, "", nil, "sh", "-c", fmt.Sprintf(probe, "127.0.0.1", port)); !strings.Contains(out, mark) {
			t.Fatalf("the host's probe of %s got %q; want the listener's answer naming %s", name, out, mark)
		}
		for _, host := range []string{hostSide, "127.0.0.1"} {
			if r := e2etest.Sh(t, c, sb.ID, fmt.Sprintf(probe, host, port)); strings.Contains(r.Stdout, mark) {
				t.Errorf("the sandbox reached %s at %s:%s: %q", name, host, port, r.Stdout)
			}
		}
	}
}
