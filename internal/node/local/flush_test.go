package local

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/output"
)

// TestTerminalFlusher: the flusher that record runs for a terminal shows
// held output once ptyFlushDelay passed, and ends when its owner stops it
// (the leak check of TestMain fails the package if it did not).
func TestTerminalFlusher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := output.Open(t.TempDir(), 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		set := &secretSet{}
		set.add([]node.Secret{{Name: "tok", Value: "tok-0123456789abcdef"}})
		w := newRedacting(l, set, true)
		ctx, stop := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { w.flushTerminal(ctx) })
		defer wg.Wait()
		defer stop()

		if err := w.frame(wire.Frame{Seq: 1, Kind: wire.FrameStdout, Data: []byte("$ to")}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got, _ := readAll(t, l); got != "$ " {
			t.Fatalf("at once %q; want the prompt without what may begin a secret", got)
		}
		time.Sleep(ptyFlushDelay - time.Millisecond)
		synctest.Wait()
		if got, _ := readAll(t, l); got != "$ " {
			t.Fatalf("before the delay %q", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got, _ := readAll(t, l); got != "$ to" {
			t.Fatalf("after the delay %q", got)
		}
	})
}
