// Package sdkgo tests the Go SDK against a real server: its retries under
// a cut connection and the example programs of examples/go.
package sdkgo

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

// cutter forwards every request to the server, but cuts the client's
// connection of the first sandbox create: before or after the server
// answered it, the server's work going on as if the client had left.
type cutter struct {
	upstream   string
	afterReply bool

	wg sync.WaitGroup // the forwards of cut requests, still running

	mu       sync.Mutex
	creates  []string // Idempotency-Key of each create, in order
	replayed []bool   // whether the server replayed each create's answer
	cut      bool
}

func (c *cutter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	isCreate := r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes"
	c.mu.Lock()
	cutThis := isCreate && !c.cut
	c.cut = c.cut || cutThis
	c.mu.Unlock()
	forward := func(ctx context.Context) (*http.Response, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, r.Method, c.upstream+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if isCreate {
			c.mu.Lock()
			c.creates = append(c.creates, r.Header.Get(cove.IdempotencyKey))
			c.replayed = append(c.replayed, resp.Header.Get("Idempotent-Replayed") == "true")
			c.mu.Unlock()
		}
		return resp, b, err
	}
	if cutThis {
		// The server keeps working on a request whose client is gone.
		ctx := context.WithoutCancel(r.Context())
		done := make(chan struct{})
		c.wg.Go(func() {
			defer close(done)
			forward(ctx)
		})
		if c.afterReply {
			<-done
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	resp, b, err := forward(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(b)
}

// TestCutCreateMakesOneSandbox: a create whose connection is cut, before
// or after the server answered, is retried under its Idempotency-Key
// and leaves exactly one sandbox, the one the SDK returns.
func TestCutCreateMakesOneSandbox(t *testing.T) {
	s := e2etest.StartServer(t)
	for _, tt := range []struct {
		name       string
		afterReply bool
	}{
		{"cut before the answer", false},
		{"cut after the answer", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := teamKey(s, "cut-"+e2etest.RunID()+map[bool]string{false: "b", true: "a"}[tt.afterReply])
			cut := &cutter{upstream: s.URL, afterReply: tt.afterReply}
			proxy := httptest.NewServer(cut)
			t.Cleanup(func() {
				cut.wg.Wait()
				proxy.Close()
			})
			c := cove.NewClient(cove.WithBaseURL(proxy.URL), cove.WithAPIKey(key))
			sb, err := c.CreateSandbox(t.Context(), api.CreateSandboxRequest{Name: "once"}, true)
			if err != nil {
				t.Fatalf("create through a cut connection: %v", err)
			}
			cut.wg.Wait()
			direct := cove.New(s.URL, key)
			page, err := direct.ListSandboxes(t.Context(), cove.SandboxQuery{})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Items) != 1 || page.Items[0].ID != sb.ID {
				t.Fatalf("the team has %d sandboxes (%+v), want exactly the one created, %s", len(page.Items), page.Items, sb.ID)
			}
			cut.mu.Lock()
			defer cut.mu.Unlock()
			if len(cut.creates) < 2 || cut.creates[0] == "" {
				t.Fatalf("creates sent with keys %q, want a retry under one key", cut.creates)
			}
			for _, k := range cut.creates {
				if k != cut.creates[0] {
					t.Errorf("keys %q differ", cut.creates)
				}
			}
			if !cut.replayed[len(cut.replayed)-1] {
				t.Errorf("the answer the SDK got was not the server's replay (replayed: %v)", cut.replayed)
			}
			if sb.State != api.StateRunning {
				t.Errorf("sandbox %s is %s, want running", sb.ID, sb.State)
			}
		})
	}
}

// teamKey makes a team on s (whose sandboxes the server's cleanup
// terminates) and returns its API key.
func teamKey(s *e2etest.Server, name string) string {
	s.NewTeam(name)
	keys := s.Keys()
	return keys[len(keys)-1]
}

// TestExamples builds every program of examples/go and runs it against a
// real server, each with a team of its own: each must exit 0 and print
// "ok" last.
func TestExamples(t *testing.T) {
	s := e2etest.StartServer(t)
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "examples", "go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 6 {
		t.Fatalf("%d examples, want the six common tasks", len(entries))
	}
	bin := t.TempDir()
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			exe := filepath.Join(bin, e.Name())
			build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", exe, "./examples/go/"+e.Name())
			build.Dir = root
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build: %v\n%s", err, out)
			}
			run := exec.CommandContext(t.Context(), exe)
			run.Env = append(os.Environ(), "COVE_URL="+s.URL, "COVE_API_KEY="+teamKey(s, "ex-"+e.Name()))
			out, err := run.CombinedOutput()
			if err != nil {
				t.Fatalf("run: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if lines[len(lines)-1] != "ok" {
				t.Fatalf("the example did not end with ok:\n%s", out)
			}
			t.Logf("%s", out)
		})
	}
}
