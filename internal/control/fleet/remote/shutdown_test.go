package remote_test

import (
	"context"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

// TestShutdownEndsFollows: a node shutting down (its API closed, then its
// HTTP server shut down, as `cove node` does on SIGTERM) ends the output
// follows it serves at once instead of waiting for their commands: a
// restart must come back within --node-lost-after.
func TestShutdownEndsFollows(t *testing.T) {
	f := newFleet(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	step := make(chan struct{})
	defer close(step)
	f.node.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
		out.Write("stdout", []byte("one"))
		<-step
		return node.Exit{}
	}
	go f.client.Run(ctx)
	must(t, f.client.Start(ctx, spec("sbx_s")))
	if _, err := f.client.Exec(ctx, "sbx_s", node.ExecSpec{ID: "cmd_1", Shell: "x"}); err != nil {
		t.Fatal(err)
	}
	out, err := f.client.Output("sbx_s", "cmd_1")
	must(t, err)
	defer out.Close()
	first := make(chan struct{})
	go out.Read(ctx, 0, true, func(c node.Chunk) error {
		select {
		case first <- struct{}{}:
		default:
		}
		return nil
	})
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the follow got nothing")
	}

	f.api.Close()
	sctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	start := time.Now()
	if err := f.srv.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown with a follow open: %v after %v", err, time.Since(start))
	}
}
