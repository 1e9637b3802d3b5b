package remote_test

import (
	"slices"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// TestVolumeCalls: the volume calls reach the node with their arguments
// and bring back its answers and its error codes; a spec's volumes
// arrive whole.
func TestVolumeCalls(t *testing.T) {
	f := newFleet(t)
	c, n := f.client, f.node
	ctx := t.Context()
	ref, err := c.CreateVolume(ctx, "vol_a", 64)
	if err != nil {
		t.Fatal(err)
	}
	if ref != (node.VolumeRef{ID: "vol_a"}) {
		t.Errorf("ref %+v", ref)
	}
	if !slices.Equal(n.Volumes(), []string{"vol_a"}) {
		t.Errorf("volumes on the node: %v", n.Volumes())
	}
	n.SetVolumeUsed("vol_a", 64<<20)
	u, err := c.VolumeUsage(ctx, ref)
	if err != nil || u != (node.VolumeInfo{SizeBytes: 64 << 20, UsedBytes: 64 << 20, Full: true}) {
		t.Errorf("usage %+v %v", u, err)
	}
	if _, err := c.VolumeUsage(ctx, node.VolumeRef{ID: "vol_nosuch"}); code(err) != api.CodeNotFound {
		t.Errorf("usage of a missing volume: %v", err)
	}
	missing := spec("sbx_missing")
	missing.Volumes = []node.VolumeMount{{VolumeRef: node.VolumeRef{ID: "vol_nosuch"}, Path: "/data"}}
	if err := c.Start(ctx, missing); code(err) != api.CodeNotFound {
		t.Errorf("start with a volume the node lacks: %v", err)
	}
	s := spec("sbx_v")
	s.Volumes = []node.VolumeMount{{VolumeRef: ref, Path: "/data", ReadOnly: true}}
	if err := c.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	if sb, _ := n.Sandbox("sbx_v"); !slices.Equal(sb.Spec.Volumes, s.Volumes) {
		t.Errorf("volumes arrived as %+v", sb.Spec.Volumes)
	}
	if err := c.DropVolume(ctx, ref); code(err) != api.CodePreconditionFailed {
		t.Errorf("drop while mounted: %v", err)
	}
	if err := c.Destroy(ctx, "sbx_v"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.DropVolume(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	if len(n.Volumes()) != 0 {
		t.Errorf("volumes after the drop: %v", n.Volumes())
	}
}
