package fleetscale_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/fleet/join/jointest"
	"github.com/cove-dev/cove/internal/node"
)

// TestNodeFailsOverBetweenReplicas: a node given both replicas' addresses
// keeps beating through the second when the first stops answering, in
// the same epoch (it does not register again), and the second places and
// starts sandboxes on it.
func TestNodeFailsOverBetweenReplicas(t *testing.T) {
	for _, ss := range stores(t) {
		t.Run(ss.name, func(t *testing.T) {
			ctx := t.Context()
			ring := jointest.Keyring(t)
			st := ss.open(t)
			a, b := startReplica(t, st, ring, true), startReplica(t, ss.open(t), ring, false)
			tok, _, err := a.js.Token(ctx)
			if err != nil || tok == "" {
				t.Fatalf("join token: %q %v", tok, err)
			}
			tokenFile := filepath.Join(t.TempDir(), "join-token")
			if err := os.WriteFile(tokenFile, []byte(tok), 0o600); err != nil {
				t.Fatal(err)
			}
			startNode(t, "solo", tokenFile, []string{a.url, b.url}, 2)
			ns, err := a.fl.Nodes(ctx)
			if err != nil || len(ns) != 1 {
				t.Fatalf("nodes = %v, %v", ns, err)
			}
			first, err := st.GetNode(ctx, ns[0].ID)
			if err != nil {
				t.Fatal(err)
			}

			a.stop()
			stopped := time.Now()
			deadline := time.Now().Add(30 * time.Second)
			for {
				n, err := st.GetNode(ctx, first.ID)
				if err != nil {
					t.Fatal(err)
				}
				if n.HeartbeatAt != nil && n.HeartbeatAt.After(stopped) {
					if n.Epoch != first.Epoch || n.State != api.NodeReady {
						t.Fatalf("after the failover the node is %s in epoch %d; want ready in epoch %d", n.State, n.Epoch, first.Epoch)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no heartbeat through the second replica since %s (last %v)", stopped, n.HeartbeatAt)
				}
				time.Sleep(100 * time.Millisecond)
			}
			spec := node.SandboxSpec{ID: "sbx_failover", Template: "managed", Resources: api.Resources{CPUs: 1, MemoryMiB: 1024}}
			if err := b.fl.Admit(ctx, spec); err != nil {
				t.Fatal(err)
			}
			if err := b.fl.Start(ctx, spec); err != nil {
				t.Fatal(err)
			}
		})
	}
}
