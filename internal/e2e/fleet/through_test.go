package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// TestThroughControl: what a client does with a sandbox works through
// the control plane to the remote node that runs it: exec with stdin,
// output followed from a sequence number, an attached terminal, files up
// and down with their digests, and a preview.
func TestThroughControl(t *testing.T) {
	f := e2etest.StartFleet(t, e2etest.FleetNodes(1))
	c := f.Control.Admin
	ctx := context.Background()
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "through"})
	if nodeOf(t, f, sb.ID) != "node-a" {
		t.Fatalf("placed on %q", nodeOf(t, f, sb.ID))
	}

	t.Run("stdin and follow after", func(t *testing.T) {
		cmd, err := c.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "cat; echo done", Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Stdin(ctx, sb.ID, cmd.ID, strings.NewReader("first\n"), false); err != nil {
			t.Fatal(err)
		}
		if err := c.Stdin(ctx, sb.ID, cmd.ID, strings.NewReader("second\n"), true); err != nil {
			t.Fatal(err)
		}
		var all []api.OutputRecord
		if err := c.Output(ctx, sb.ID, cmd.ID, 0, true, func(r api.OutputRecord) error {
			all = append(all, r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var text bytes.Buffer
		for _, r := range all {
			text.Write(r.Data)
		}
		if text.String() != "first\nsecond\ndone\n" || all[len(all)-1].Type != "exit" {
			t.Fatalf("followed output %q (%d records)", text.String(), len(all))
		}
		// From a sequence number: only what came after it.
		after := all[0].Seq
		var rest bytes.Buffer
		if err := c.Output(ctx, sb.ID, cmd.ID, after, false, func(r api.OutputRecord) error {
			if r.Seq <= after {
				return fmt.Errorf("record %d after %d", r.Seq, after)
			}
			rest.Write(r.Data)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if want := strings.TrimPrefix(text.String(), string(all[0].Data)); rest.String() != want {
			t.Fatalf("output after %d: %q, want %q", after, rest.String(), want)
		}
	})

	t.Run("attached terminal", func(t *testing.T) {
		cmd, err := c.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "read line; echo got:$line; tty", Stdin: true, PTY: &api.PTY{Cols: 80, Rows: 24}})
		if err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		a, err := c.Attach(actx, sb.ID, cmd.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Resize(actx, 100, 30); err != nil {
			t.Fatal(err)
		}
		if err := a.Write(actx, []byte("hello\r")); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		for {
			data, done, err := a.Read(actx)
			if err != nil {
				t.Fatalf("attach read: %v (so far %q)", err, out.String())
			}
			out.Write(data)
			if done {
				break
			}
		}
		if !strings.Contains(out.String(), "got:hello") || !strings.Contains(out.String(), "/dev/pts/") {
			t.Fatalf("terminal output %q", out.String())
		}
	})

	t.Run("files with digests", func(t *testing.T) {
		body := make([]byte, 3<<20+17)
		rand.Read(body)
		if _, err := c.WriteFile(ctx, sb.ID, "/workspace/up.bin", bytes.NewReader(body)); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		fr, err := c.DownloadFile(ctx, sb.ID, "/workspace/up.bin", &got)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), body) || len(fr.Digest) != 32 {
			t.Fatalf("download: %d bytes (want %d), digest %x", got.Len(), len(body), fr.Digest)
		}
		if out := e2etest.MustOK(t, c, sb.ID, "sha256sum /workspace/up.bin | cut -c1-64"); strings.TrimSpace(out) != fmt.Sprintf("%x", fr.Digest) {
			t.Fatalf("sha256sum in the sandbox %q, Repr-Digest %x", out, fr.Digest)
		}
		arch, err := c.ReadArchive(ctx, sb.ID, "/workspace")
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, arch)
		arch.Close()
		if err != nil || n < int64(len(body)) {
			t.Fatalf("archive of /workspace: %d bytes, %v", n, err)
		}
	})

	t.Run("preview", func(t *testing.T) {
		e2etest.MustOK(t, c, sb.ID, "mkdir -p /workspace/www && echo 'served from the node' > /workspace/www/index.html")
		if _, err := c.Exec(ctx, sb.ID, api.CreateCommandRequest{Command: "exec httpd -f -p 8000 -h /workspace/www"}); err != nil {
			t.Fatal(err)
		}
		p, err := c.CreatePreview(ctx, sb.ID, api.CreatePreviewRequest{Port: 8000})
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(f.Control.URL, "http://"))
		host := fmt.Sprintf("8000-%s.localhost:%s", sb.ID, port)
		deadline := time.Now().Add(time.Minute)
		for {
			req, _ := http.NewRequest("GET", f.Control.URL+"/index.html", nil)
			req.Host = host
			req.Header.Set(api.PreviewTokenHeader, p.Token)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && string(b) == "served from the node\n" {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("preview: %d %q", resp.StatusCode, b)
				}
			} else if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("file watch", func(t *testing.T) {
		// The node keeps the journal; the control plane carries its
		// records. Until a record is seen, keep making folders with a file.
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		seen := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; i < 100; i++ {
				select {
				case <-seen:
					return
				case <-time.After(200 * time.Millisecond):
				}
				c.ExecWait(wctx, sb.ID, api.CreateCommandRequest{Command: fmt.Sprintf("mkdir -p /workspace/w/n%d && echo hi > /workspace/w/n%d/f.txt", i, i)})
			}
		})
		e2etest.MustOK(t, c, sb.ID, "mkdir -p /workspace/w")
		var first api.FileEvent
		errDone := fmt.Errorf("done")
		err := c.WatchFiles(wctx, sb.ID, cove.WatchQuery{Path: "/workspace/w", Recursive: true}, func(ev api.FileEvent) error {
			if ev.Type == api.FileWrite && strings.HasSuffix(ev.Path, "/f.txt") && ev.Entry != nil && ev.Entry.Size == 3 {
				first = ev
				return errDone
			}
			return nil
		})
		close(seen)
		wg.Wait()
		if err != errDone {
			t.Fatalf("watch through the control plane: %v", err)
		}
		if _, err := c.WriteFile(ctx, sb.ID, "/workspace/w/later.txt", strings.NewReader("later")); err != nil {
			t.Fatal(err)
		}
		next := first.Seq + 1
		err = c.WatchFiles(wctx, sb.ID, cove.WatchQuery{Path: "/workspace/w", Recursive: true, After: first.Seq}, func(ev api.FileEvent) error {
			if ev.Seq != next || ev.Type == api.FileDropped {
				return fmt.Errorf("resumed record %+v, want seq %d", ev, next)
			}
			next++
			if ev.Type == api.FileCreate && ev.Path == "/workspace/w/later.txt" {
				return errDone
			}
			return nil
		})
		if err != errDone {
			t.Fatalf("resumed watch through the control plane: %v", err)
		}
	})
}
