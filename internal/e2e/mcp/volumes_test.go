package mcp

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

type volume struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	SizeMiB   int64    `json:"size_mib"`
	Sandboxes []string `json:"sandboxes"`
}

type mounted struct {
	ID      string `json:"id"`
	Volumes []struct {
		Name     string `json:"name"`
		Path     string `json:"path"`
		ReadOnly bool   `json:"read_only"`
		VolumeID string `json:"volume_id"`
	} `json:"volumes"`
}

// TestMCPVolumes: an agent makes a volume, mounts it in two sandboxes
// that share its files (one read-only), and deletes it once they are
// gone; deleting it while mounted is a tool error naming the sandboxes.
func TestMCPVolumes(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "cove-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: coveCmd(s, "mcp")}, nil)
	if err != nil {
		t.Fatalf("connect to cove mcp: %v", err)
	}
	defer cs.Close()

	var v volume
	call(ctx, t, cs, "create_volume", map[string]any{"name": "shared", "size_mib": 64}, &v)
	if !strings.HasPrefix(v.ID, "vol_") || v.Name != "shared" || v.SizeMiB != 64 {
		t.Fatalf("create_volume: %+v", v)
	}
	var a, b mounted
	call(ctx, t, cs, "create_sandbox", map[string]any{"volumes": []map[string]any{{"name": "shared", "path": "/shared"}}}, &a)
	call(ctx, t, cs, "create_sandbox", map[string]any{"volumes": []map[string]any{{"name": v.ID, "path": "/ro", "read_only": true}}}, &b)
	if len(a.Volumes) != 1 || a.Volumes[0].VolumeID != v.ID || a.Volumes[0].Path != "/shared" || a.Volumes[0].ReadOnly {
		t.Errorf("create_sandbox volumes: %+v", a.Volumes)
	}
	if len(b.Volumes) != 1 || !b.Volumes[0].ReadOnly {
		t.Errorf("create_sandbox read-only volumes: %+v", b.Volumes)
	}
	var o output
	call(ctx, t, cs, "run_command", map[string]any{"sandbox": a.ID, "command": "echo from-a > /shared/note"}, &o)
	call(ctx, t, cs, "run_command", map[string]any{"sandbox": b.ID, "command": "cat /ro/note; touch /ro/x"}, &o)
	if o.Stdout != "from-a\n" || o.ExitCode == nil || *o.ExitCode == 0 {
		t.Errorf("the read-only sandbox: %+v", o)
	}
	var l struct {
		Volumes []volume `json:"volumes"`
	}
	call(ctx, t, cs, "list_volumes", map[string]any{}, &l)
	i := slices.IndexFunc(l.Volumes, func(x volume) bool { return x.ID == v.ID })
	if i < 0 || !slices.Contains(l.Volumes[i].Sandboxes, a.ID) || !slices.Contains(l.Volumes[i].Sandboxes, b.ID) {
		t.Errorf("list_volumes: %+v", l)
	}
	if msg := callErr(ctx, t, cs, "delete_volume", map[string]any{"volume": "shared"}); !strings.Contains(msg, "conflict") || !strings.Contains(msg, a.ID) {
		t.Errorf("delete_volume while mounted: %q", msg)
	}
	if msg := callErr(ctx, t, cs, "create_sandbox", map[string]any{"volumes": []map[string]any{{"name": "nope", "path": "/x"}}}); !strings.Contains(msg, "not_found") {
		t.Errorf("create_sandbox with an unknown volume: %q", msg)
	}
	for _, id := range []string{a.ID, b.ID} {
		var sb mounted
		call(ctx, t, cs, "terminate_sandbox", map[string]any{"sandbox": id}, &sb)
		if got, err := s.Admin.WaitSandbox(ctx, id, api.StateTerminated, 2*time.Minute); err != nil || got.State != api.StateTerminated {
			t.Fatalf("terminate %s: %+v %v", id, got, err)
		}
	}
	var d struct {
		Deleted string `json:"deleted"`
	}
	call(ctx, t, cs, "delete_volume", map[string]any{"volume": "shared"}, &d)
	if msg := callErr(ctx, t, cs, "delete_volume", map[string]any{"volume": "shared"}); !strings.Contains(msg, "not_found") {
		t.Errorf("delete_volume again: %q", msg)
	}
}
