package snapshots

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/node/saves"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
	cove "github.com/cove-dev/cove/sdk/go"
)

// nodeOf is the name of the node a fleet placed a sandbox on.
func nodeOf(t *testing.T, f *e2etest.Fleet, id string) string {
	t.Helper()
	code, _, body := e2etest.RawRequest(t, "GET", f.Control.URL+"/v1/sandboxes/"+id, f.Control.AdminKey, "")
	if code != 200 {
		t.Fatalf("GET sandbox %s: %d %s", id, code, body)
	}
	var sb struct {
		Node *struct {
			Name string `json:"name"`
		} `json:"node"`
	}
	if err := json.Unmarshal(body, &sb); err != nil {
		t.Fatal(err)
	}
	if sb.Node == nil {
		t.Fatalf("sandbox %s has no node", id)
	}
	return sb.Node.Name
}

// TestFleet: in a fleet on PostgreSQL and an S3 save store, a snapshot
// taken on one node starts a sandbox on the other, which has never had
// its layer (it comes from the save store); that sandbox forks there,
// and returns to the snapshot after its files are removed, byte for byte
// each time. The snapshot answers 409 naming what stands on it until
// those sandboxes end, and is deleted then, from the save store too.
func TestFleet(t *testing.T) {
	ctx := t.Context()
	f := e2etest.StartFleet(t, e2etest.FleetNodes(2), e2etest.FleetLostAfter(20*time.Second),
		e2etest.FleetStore(pgserver.Start(t).NewDatabase(t)))
	c := f.Control.Admin

	parent := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "parent"})
	fill(t, c, parent.ID, 3)
	want := e2etest.MustOK(t, c, parent.ID, treeSum("/workspace"))
	snap, err := c.CreateSnapshot(ctx, parent.ID, "ready")
	if err != nil {
		t.Fatal(err)
	}
	// Its files are in the shared save store.
	st, err := saves.Open(ctx, f.Saves, f.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if m, err := st.Stat(ctx, snap.ID, ""); err != nil || "sha256:"+m.SHA256 != snap.Digest {
		t.Fatalf("the snapshot's files in the save store: %+v %v, want digest %s", m, err, snap.Digest)
	}
	home := nodeOf(t, f, parent.ID)
	// Everything after goes to the other node.
	code, _, body := e2etest.RawRequest(t, "POST", f.Control.URL+"/v1/nodes/"+home+"/drain", f.Control.AdminKey, "")
	if code/100 != 2 {
		t.Fatalf("drain %s: %d %s", home, code, body)
	}

	on := e2etest.Create(t, c, api.CreateSandboxRequest{Name: "on", Source: &api.Source{Type: api.SourceSnapshot, SnapshotID: "ready"}})
	if got := nodeOf(t, f, on.ID); got == home {
		t.Fatalf("the sandbox on the snapshot was placed on %s, which is draining", got)
	}
	if got := e2etest.MustOK(t, c, on.ID, treeSum("/workspace")); got != want {
		t.Fatalf("a sandbox on the snapshot on the other node: tree %s, want %s", strings.TrimSpace(got), strings.TrimSpace(want))
	}

	forks, err := c.ForkSandbox(ctx, on.ID, api.ForkSandboxRequest{Count: 2}, true)
	if err != nil {
		t.Fatal(err)
	}
	for i, fk := range forks {
		if got := nodeOf(t, f, fk.ID); got == home {
			t.Errorf("fork %d was placed on %s, which is draining", i, got)
		}
		if got := e2etest.MustOK(t, c, fk.ID, treeSum("/workspace")); got != want {
			t.Errorf("fork %d: tree %s, want %s", i, strings.TrimSpace(got), strings.TrimSpace(want))
		}
	}
	e2etest.MustOK(t, c, forks[0].ID, "echo only0 > /workspace/data/deep/s")
	if got := e2etest.MustOK(t, c, forks[1].ID, "cat /workspace/data/deep/s"); got != "small\n" {
		t.Errorf("fork 1 sees fork 0's write: %q", got)
	}

	e2etest.MustOK(t, c, on.ID, "rm -rf /workspace/* && echo later > /workspace/later")
	if _, err := c.RestoreSandbox(ctx, on.ID, snap.ID, true); err != nil {
		t.Fatal(err)
	}
	if got := e2etest.MustOK(t, c, on.ID, treeSum("/workspace")); got != want {
		t.Errorf("after the restore: tree %s, want %s", strings.TrimSpace(got), strings.TrimSpace(want))
	}

	err = c.DeleteSnapshot(ctx, snap.ID)
	if api.ErrorCode(err) != api.CodeConflict || !strings.Contains(err.Error(), on.ID) {
		t.Fatalf("delete of a snapshot a sandbox stands on: %v, want 409 naming %s", err, on.ID)
	}
	for _, sb := range append([]api.Sandbox{on}, forks...) {
		terminate(t, c, sb.ID)
	}
	// The forks' snapshot (taken of a sandbox on this one) goes with its
	// last fork, after which nothing stands on this one.
	for i := 0; ; i++ {
		err = c.DeleteSnapshot(ctx, snap.ID)
		if api.ErrorCode(err) != api.CodeConflict || i == 100 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("delete once nothing stands on it: %v", err)
	}
	if _, err := c.GetSnapshot(ctx, snap.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("the deleted snapshot: %v", err)
	}
	// Its files left the shared save store.
	if _, err := st.Stat(ctx, snap.ID, ""); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("the deleted snapshot's files in the save store: %v", err)
	}
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Source: &api.Source{Type: api.SourceSnapshot, SnapshotID: snap.ID}}, false); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("a sandbox on the deleted snapshot: %v", err)
	}
}

func terminate(t *testing.T, c *cove.Client, id string) {
	t.Helper()
	if _, err := c.TerminateSandbox(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitSandbox(context.Background(), id, api.StateTerminated, time.Minute); err != nil {
		t.Fatal(err)
	}
}
