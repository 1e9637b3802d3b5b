package fleet

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

// outputNode is nodetest's node whose output is kept only for the
// commands it ran, as a real node's: any other is not_found. As the
// remote client's, its Output opens lazily: the not_found comes from the
// first Read, not from Output.
type outputNode struct {
	*nodetest.Node
	mu  sync.Mutex
	ran map[string]bool
}

func (n *outputNode) Exec(ctx context.Context, id string, spec node.ExecSpec) (node.Started, error) {
	n.mu.Lock()
	n.ran[id+"/"+spec.ID] = true
	n.mu.Unlock()
	return n.Node.Exec(ctx, id, spec)
}

func (n *outputNode) Output(id, commandID string) (node.Output, error) {
	n.mu.Lock()
	ok := n.ran[id+"/"+commandID]
	n.mu.Unlock()
	if !ok {
		return missingOutput{commandID}, nil
	}
	return n.Node.Output(id, commandID)
}

// missingOutput is an output its node does not hold, found out at Read.
type missingOutput struct{ commandID string }

func (m missingOutput) Close() error { return nil }
func (m missingOutput) Read(context.Context, int64, bool, func(node.Chunk) error) (*node.Exit, error) {
	return nil, api.Errorf(api.CodeNotFound, "no output of %s here", m.commandID)
}
func (m missingOutput) Stream(string) (io.ReaderAt, int64, error) {
	return nil, 0, api.Errorf(api.CodeNotFound, "no output of %s here", m.commandID)
}
func (missingOutput) LastSeq() int64           { return 0 }
func (missingOutput) Sizes() (int64, int64)    { return 0, 0 }
func (missingOutput) Exit() *node.Exit         { return nil }
func (missingOutput) Ended() bool              { return true }
func (missingOutput) Changed() <-chan struct{} { return nil }

// TestOutputOfSandboxPlacedNowhere: the output of a sandbox that runs
// nowhere now (asleep, or a workload whose runtime was removed) is read
// from the node that ran it, whichever node is asked first; output no
// connected node holds is not_found.
func TestOutputOfSandboxPlacedNowhere(t *testing.T) {
	ctx := t.Context()
	nodes := map[string]*outputNode{}
	f, err := New(Config{Store: newMemStore(), Dial: func(nodeID, addr string) (NodeClient, error) {
		n := &outputNode{Node: nodetest.New(), ran: map[string]bool{}}
		n.Run = func(ctx context.Context, spec node.ExecSpec, out *nodetest.Output) node.Exit {
			out.Write("stdout", []byte("ran on "+addr))
			return node.Exit{}
		}
		n.OnExit = func(string, string, node.Exit, bool) {}
		nodes[addr] = n
		return n, nil
	}})
	must(t, err)
	f.SetSandboxes(&lostRecorder{})
	must(t, f.Load(ctx))
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	for _, name := range []string{"a", "b", "c"} {
		_, err := f.Register(ctx, "", registration(name, 2))
		must(t, err)
	}
	tests := []struct {
		id    string
		sleep bool // asleep (a save recorded) rather than its runtime removed
	}{{"sbx_slept", true}, {"wl_ended", false}}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			must(t, f.Admit(ctx, spec(tt.id, 2)))
			must(t, f.Start(ctx, spec(tt.id, 2)))
			_, err := f.Exec(ctx, tt.id, node.ExecSpec{ID: "cmd_1"})
			must(t, err)
			on, _ := f.SandboxNode(tt.id)
			waitEnded(t, f, tt.id)
			if tt.sleep {
				_, err := f.FinishSleep(ctx, tt.id)
				must(t, err)
			} else {
				must(t, f.DestroyRuntime(ctx, tt.id))
			}
			if n, ok := f.SandboxNode(tt.id); ok {
				t.Fatalf("%s still placed on %s", tt.id, n.Name)
			}
			o, err := f.Output(tt.id, "cmd_1")
			must(t, err)
			if got := readAll(t, o); got != "ran on "+on.Name {
				t.Fatalf("output %q; want it from node %s", got, on.Name)
			}
			_, err = f.Output(tt.id, "cmd_other")
			wantCode(t, err, api.CodeNotFound)
		})
	}
}

// waitEnded waits until the command cmd_1 of a sandbox has ended.
func waitEnded(t *testing.T, f *Fleet, id string) {
	t.Helper()
	o, err := f.Output(id, "cmd_1")
	must(t, err)
	defer o.Close()
	for !o.Ended() {
		select {
		case <-o.Changed():
		case <-t.Context().Done():
			t.Fatal("cmd_1 did not end")
		}
	}
}

func readAll(t *testing.T, o node.Output) string {
	t.Helper()
	defer o.Close()
	var b strings.Builder
	_, err := o.Read(t.Context(), 0, false, func(c node.Chunk) error {
		b.Write(c.Data)
		return nil
	})
	must(t, err)
	return b.String()
}
