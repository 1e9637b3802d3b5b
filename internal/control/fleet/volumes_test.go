package fleet

import (
	"slices"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// TestVolumePlacement: a volume is made on the ready node with the
// largest data disk; its calls go there; a sandbox that mounts it is
// placed there (started and woken), even where another node has more
// room, and nowhere else when that node is full; volumes on two nodes
// are refused, and a node that is gone answers unavailable.
func TestVolumePlacement(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := t.Context()
	ra := registration("a", 2)
	ra.Capacity.DiskMiB = 500
	_, err := h.f.Register(ctx, "", ra)
	must(t, err)
	rb := registration("b", 8)
	rb.Capacity.DiskMiB = 100
	_, err = h.f.Register(ctx, "", rb)
	must(t, err)

	va, err := h.f.CreateVolume(ctx, "vol_a", 64)
	must(t, err)
	if va != (node.VolumeRef{ID: "vol_a", Node: "a"}) {
		t.Fatalf("volume made at %+v; want on a", va)
	}
	if got := h.node("a").Volumes(); !slices.Equal(got, []string{"vol_a"}) {
		t.Fatalf("volumes of a: %v", got)
	}
	// b gets one too (a refuses: no room).
	h.node("a").Fail("create-volume", api.Errorf(api.CodeResourceExhausted, "full"))
	vb, err := h.f.CreateVolume(ctx, "vol_b", 64)
	must(t, err)
	h.node("a").Fail("create-volume", nil)
	if vb.Node != "b" {
		t.Fatalf("second volume on %q; want b", vb.Node)
	}

	s := spec("sbx_v", 1)
	s.Volumes = []node.VolumeMount{{VolumeRef: va, Path: "/data"}}
	must(t, h.f.Admit(ctx, s))
	must(t, h.f.Start(ctx, s))
	if got := h.placedOn("sbx_v"); got != "a" {
		t.Fatalf("placed on %q; want a, which holds its volume", got)
	}
	wantCode(t, h.f.DropVolume(ctx, va), api.CodePreconditionFailed)
	h.node("a").SetVolumeUsed("vol_a", 1<<20)
	u, err := h.f.VolumeUsage(ctx, va)
	must(t, err)
	if u.UsedBytes != 1<<20 || u.SizeBytes != 64<<20 {
		t.Errorf("usage %+v", u)
	}
	_, err = h.f.FinishSleep(ctx, "sbx_v")
	must(t, err)
	must(t, h.f.Wake(ctx, s))
	if got := h.placedOn("sbx_v"); got != "a" {
		t.Fatalf("woken on %q; want a", got)
	}

	// a is full: a sandbox with its volume is not sent to b.
	big := spec("sbx_big", 2)
	big.Volumes = s.Volumes
	wantCode(t, h.f.Admit(ctx, big), api.CodeResourceExhausted)
	// Volumes on two nodes.
	two := spec("sbx_two", 1)
	two.Volumes = []node.VolumeMount{{VolumeRef: va, Path: "/a"}, {VolumeRef: vb, Path: "/b"}}
	wantCode(t, h.f.Admit(ctx, two), api.CodePreconditionFailed)
	if got := h.placedOn("sbx_two"); got != "" {
		t.Errorf("sbx_two placed on %q", got)
	}
	// b's volume: placed on b.
	onB := spec("sbx_b", 1)
	onB.Volumes = []node.VolumeMount{{VolumeRef: vb, Path: "/b"}}
	must(t, h.f.Start(ctx, onB))
	if got := h.placedOn("sbx_b"); got != "b" {
		t.Fatalf("placed on %q; want b", got)
	}

	// a goes away.
	must(t, h.f.Destroy(ctx, "sbx_v"))
	must(t, h.f.Remove(ctx, "a"))
	later := spec("sbx_later", 1)
	later.Volumes = s.Volumes
	wantCode(t, h.f.Start(ctx, later), api.CodeUnavailable)
	_, err = h.f.VolumeUsage(ctx, va)
	wantCode(t, err, api.CodeUnavailable)
	wantCode(t, h.f.DropVolume(ctx, node.VolumeRef{ID: "vol_x", Node: "nosuch"}), api.CodeUnavailable)
	must(t, h.f.Destroy(ctx, "sbx_b"))
	must(t, h.f.DropVolume(ctx, vb))
	if got := h.node("b").Volumes(); len(got) != 0 {
		t.Errorf("volumes of b after the drop: %v", got)
	}
}
