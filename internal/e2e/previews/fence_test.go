package previews

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// connectScript connects to argv[1]:argv[2] with a 3-second timeout and
// prints "open" or the error.
const connectScript = `import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), 3).close(); print("open")
except Exception as e:
    print("closed", e)
`

// TestPreviewFence: the node reaches exactly the published ports of a
// sandbox, as cove serve's own user: not another port of it, not a port
// of another sandbox, not as another host user, not from another network
// namespace behind the node; through the router, unpublished ports and
// other sandboxes' ports are not found, and one preview's token opens no
// other. From inside another sandbox (user and root, under 0.0.0.0/0)
// nothing published is reached either.
func TestPreviewFence(t *testing.T) {
	s := startServer(t)
	c := previewTeam(t, s, "fence")
	a := e2etest.Create(t, c, api.CreateSandboxRequest{})
	b := e2etest.Create(t, c, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"0.0.0.0/0"}}})
	for _, sb := range []api.Sandbox{a, b} {
		writeFile(t, c, sb.ID, "/workspace/index.html", "secret of "+sb.ID+"\n")
		background(t, c, sb.ID, "cd /workspace && exec python3 -m http.server 8000")
		background(t, c, sb.ID, "cd /workspace && exec python3 -m http.server 8001")
	}
	pa, err := c.CreatePreview(t.Context(), a.ID, api.CreatePreviewRequest{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := c.CreatePreview(t.Context(), b.ID, api.CreatePreviewRequest{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	tokA := map[string]string{api.PreviewTokenHeader: pa.Token}
	waitServing(t, s, previewHost(s, a.ID, 8000), "/", tokA)
	waitServing(t, s, previewHost(s, b.ID, 8000), "/", map[string]string{api.PreviewTokenHeader: pb.Token})
	addrA, addrB := sandboxAddr(t, s, a.ID), sandboxAddr(t, s, b.ID)

	t.Run("router", func(t *testing.T) {
		for _, tt := range []struct {
			name, host, path string
			hdr              map[string]string
			want             int
		}{
			{"unpublished port by host", previewHost(s, a.ID, 8001), "/", tokA, 404},
			{"another sandbox with this token", previewHost(s, b.ID, 8000), "/", tokA, 401},
			{"another sandbox's unpublished port", previewHost(s, b.ID, 8001), "/", tokA, 404},
			{"the former path form", "", "/v1/sandboxes/" + a.ID + "/ports/8000/", tokA, 404},
		} {
			t.Run(tt.name, func(t *testing.T) {
				resp, body := request(t, s, "GET", tt.host, tt.path, tt.hdr)
				if resp.StatusCode != tt.want || strings.Contains(body, "secret of") {
					t.Errorf("%d %q; want %d", resp.StatusCode, body, tt.want)
				}
			})
		}
	})

	t.Run("from the node", func(t *testing.T) {
		for _, tt := range []struct {
			name, addr string
			port       int
			open       bool
		}{
			{"published port", addrA, 8000, true},
			{"unpublished port", addrA, 8001, false},
			{"another sandbox's unpublished port", addrB, 8001, false},
			{"a port nothing listens on", addrA, 9, false},
		} {
			t.Run(tt.name, func(t *testing.T) {
				err := dial(tt.addr, tt.port)
				if (err == nil) != tt.open {
					t.Errorf("dial %s:%d: %v; want open=%t", tt.addr, tt.port, err, tt.open)
				}
			})
		}
	})

	t.Run("another host user", func(t *testing.T) {
		out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
			"/usr/bin/python3", "-c", connectScript, addrA, "8000").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "closed") {
			t.Errorf("nobody connecting to a published port: %v %s", err, out)
		}
	})

	t.Run("another network namespace", func(t *testing.T) {
		host := e2etest.StartTestHost(t)
		out, err := exec.Command("ip", "netns", "exec", host.NS, "/usr/bin/python3", "-c", connectScript, addrA, "8000").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "closed") {
			t.Errorf("from %s: %v %s", host.NS, err, out)
		}
	})

	t.Run("from another sandbox", func(t *testing.T) {
		for _, user := range []string{"user", "root"} {
			t.Run(user, func(t *testing.T) {
				// Every TCP connection of a sandbox goes to the node's
				// gateway, which refuses the node's own subnet: the app's
				// answer never comes back, on either port.
				res := e2etest.Sh(t, c, b.ID, "curl -sS -m 5 http://"+addrA+":8000/index.html; curl -sS -m 5 http://"+addrA+":8001/index.html",
					func(r *api.CreateCommandRequest) { r.User = user }, e2etest.WithTimeout(60))
				if strings.Contains(res.Stdout, "secret of") {
					t.Errorf("sandbox %s reached sandbox %s:\n%s\n%s", b.ID, a.ID, res.Stdout, res.Stderr)
				}
			})
		}
	})
}

// TestPreviewHostileApp: what the router adds never reaches the app (the
// preview's token header and cookie, a cove API key), and the app's
// cookies stay on its own preview host (a Domain attribute is dropped).
func TestPreviewHostileApp(t *testing.T) {
	s := startServer(t)
	c := previewTeam(t, s, "hostile")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	writeFile(t, c, sb.ID, "/workspace/app.py", hostileApp)
	for _, run := range []struct {
		user string
		port int
	}{{"user", 8002}, {"root", 8003}} {
		background(t, c, sb.ID, fmt.Sprintf("exec python3 /workspace/app.py %d", run.port), func(r *api.CreateCommandRequest) { r.User = run.user })
		p, err := c.CreatePreview(t.Context(), sb.ID, api.CreatePreviewRequest{Port: run.port})
		if err != nil {
			t.Fatal(err)
		}
		keys := s.Keys()
		hdr := map[string]string{
			api.PreviewTokenHeader: p.Token,
			"Authorization":        "Bearer " + keys[len(keys)-1],
			"Cookie":               fmt.Sprintf("cove_preview=%d-%s.%s; theirs=1", run.port, sb.ID, p.Token),
		}
		waitServing(t, s, previewHost(s, sb.ID, run.port), "/", hdr)
		for _, form := range []struct{ name, host, path, cookiePath string }{
			{"host", previewHost(s, sb.ID, run.port), "/", "/"},
		} {
			t.Run(run.user+"/"+form.name, func(t *testing.T) {
				resp, body := request(t, s, "GET", form.host, form.path, hdr)
				if resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, body)
				}
				var seen map[string]string
				if err := json.Unmarshal([]byte(body), &seen); err != nil {
					t.Fatal(err)
				}
				if _, ok := seen["authorization"]; ok || seen[strings.ToLower(api.PreviewTokenHeader)] != "" || seen["cookie"] != "theirs=1" {
					t.Errorf("the app saw %v", seen)
				}
				if strings.Contains(body, p.Token) || strings.Contains(body, "cove_") {
					t.Errorf("a token or key reached the app: %s", body)
				}
				cks := resp.Cookies()
				if len(cks) != 1 || cks[0].Domain != "" || cks[0].Path != form.cookiePath {
					t.Errorf("cookies %+v; want planted, host-only, path %s", cks, form.cookiePath)
				}
			})
		}
	}
}

// TestPreviewWake: a request to a preview with wake:true wakes its asleep
// sandbox and is answered once the app listens again (processes do not
// survive a sleep; the test starts the app when the sandbox runs); a
// preview without wake answers 503 and leaves the sandbox asleep.
func TestPreviewWake(t *testing.T) {
	s := startServer(t)
	c := previewTeam(t, s, "sleepy")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	writeFile(t, c, sb.ID, "/workspace/index.html", "awake again\n")
	for _, p := range []api.CreatePreviewRequest{{Port: 8000, Visibility: "public", Wake: true}, {Port: 8001, Visibility: "public"}} {
		if _, err := c.CreatePreview(t.Context(), sb.ID, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.SleepSandbox(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := c.WaitSandbox(t.Context(), sb.ID, api.StateAsleep, 2*time.Minute); err != nil || got.State != api.StateAsleep {
		t.Fatalf("%v %s", err, got.State)
	}

	resp, body := request(t, s, "GET", previewHost(s, sb.ID, 8001), "/index.html", nil)
	if resp.StatusCode != 503 || !strings.Contains(body, "does not wake") {
		t.Errorf("preview without wake: %d %s", resp.StatusCode, body)
	}
	if got, _ := c.GetSandbox(t.Context(), sb.ID); got.State != api.StateAsleep {
		t.Fatalf("a preview without wake changed the sandbox to %s", got.State)
	}

	var wg sync.WaitGroup
	var status int
	var got string
	wg.Go(func() {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", s.URL+"/index.html", nil)
		req.Host = previewHost(s, sb.ID, 8000)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		status, got = r.StatusCode, string(b)
	})
	if w, err := c.WaitSandbox(t.Context(), sb.ID, api.StateRunning, 3*time.Minute); err != nil || w.State != api.StateRunning {
		t.Fatalf("the preview's request did not wake the sandbox: %v %s", err, w.State)
	}
	background(t, c, sb.ID, "cd /workspace && exec python3 -m http.server 8000")
	wg.Wait()
	if status != 200 || got != "awake again\n" {
		t.Errorf("request that woke the sandbox: %d %q", status, got)
	}
}
