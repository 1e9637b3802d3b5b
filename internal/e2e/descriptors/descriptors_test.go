// Package descriptors checks that `cove serve` holds files only for what
// runs and what is being read: thousands of commands, their output read,
// followed and abandoned, leave its open descriptors where they were.
package descriptors

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// settledFDs is the server's descriptor count once it stops falling:
// connections closed by clients are closed by the server a moment later.
func settledFDs(t *testing.T, s *e2etest.Server, limit int) int {
	t.Helper()
	n := openFDs(t, s.PID())
	for range 100 {
		if n <= limit {
			return n
		}
		time.Sleep(50 * time.Millisecond)
		n = openFDs(t, s.PID())
	}
	return n
}

func TestDescriptorsFollowUse(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	c := s.Admin
	ctx := t.Context()
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	e2etest.MustOK(t, c, sb.ID, "echo warm")
	http.DefaultClient.CloseIdleConnections()
	start := openFDs(t, s.PID())

	const commands, workers = 2000, 4
	ids := make([]string, commands)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < commands; i += workers {
				res, err := c.ExecWait(ctx, sb.ID, api.CreateCommandRequest{Command: "echo hi"})
				if err == nil && res.Stdout != "hi\n" {
					err = fmt.Errorf("command %d printed %q", i, res.Stdout)
				}
				if err != nil {
					errs <- err
					return
				}
				ids[i] = res.Command.ID
				// Every output is read again, NDJSON and raw.
				n := 0
				if err := c.Output(ctx, sb.ID, res.Command.ID, 0, false, func(api.OutputRecord) error { n++; return nil }); err != nil {
					errs <- err
					return
				}
				if i%10 == 0 {
					st, _, body := e2etest.RawRequest(t, "GET", s.URL+"/v1/sandboxes/"+sb.ID+"/commands/"+res.Command.ID+"/stdout", s.AdminKey, "")
					if st != http.StatusOK || string(body) != "hi\n" {
						errs <- fmt.Errorf("raw stdout of %s: %d %q", res.Command.ID, st, body)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Followers of running commands that go away mid-stream.
	for range 20 {
		cmd, err := c.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "echo start; sleep 600", Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		fctx, cancel := context.WithCancel(ctx)
		err = c.Output(fctx, sb.ID, cmd.ID, 0, true, func(api.OutputRecord) error {
			cancel() // disconnect after the first chunk
			return nil
		})
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("follow: %v", err)
		}
		if err := c.Signal(ctx, sb.ID, cmd.ID, "KILL"); err != nil {
			t.Fatal(err)
		}
		// Following to the end returns once the kill is recorded.
		if err := c.Output(ctx, sb.ID, cmd.ID, 0, true, func(api.OutputRecord) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	if n := settledFDs(t, s, start+20); n > start+20 {
		t.Fatalf("after %d commands cove serve holds %d descriptors; it held %d before", commands, n, start)
	}

	// Terminate, then read again: the output is gone and nothing is made.
	if _, err := c.TerminateSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(ctx, sb.ID, api.StateTerminated, time.Minute); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(s.DataDir, "output", sb.ID)
	for _, id := range []string{ids[0], ids[commands/2], ids[commands-1]} {
		err := c.Output(ctx, sb.ID, id, 0, false, func(api.OutputRecord) error { return nil })
		if api.ErrorCode(err) != api.CodeNotFound {
			t.Errorf("output of %s after terminate: %v, want not_found", id, err)
		}
		st, _, _ := e2etest.RawRequest(t, "GET", s.URL+"/v1/sandboxes/"+sb.ID+"/commands/"+id+"/stdout", s.AdminKey, "")
		if st != http.StatusNotFound {
			t.Errorf("raw stdout of %s after terminate: %d, want 404", id, st)
		}
	}
	if _, err := os.Stat(outDir); !os.IsNotExist(err) {
		t.Errorf("reading output after terminate made %s again (%v)", outDir, err)
	}
	http.DefaultClient.CloseIdleConnections()
	if n := settledFDs(t, s, start+20); n > start+20 {
		t.Fatalf("after terminate cove serve holds %d descriptors; it held %d at the start", n, start)
	}
}
