package local

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/mountinfo"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/image"
	"github.com/cove-dev/cove/internal/node/runtime"
	"github.com/cove-dev/cove/internal/node/saves"
	"github.com/cove-dev/cove/internal/testsupport/s3server"
)

// TestVolumeOutlivesSandbox: through the node's calls, a volume keeps its
// files across a restart of the node (a new runtime and node over the
// same directories), a sleep, whose save holds none of them, a wake,
// which mounts it again, and its sandbox's destroy; it cannot be dropped
// while a sandbox mounts it, and is gone after the drop.
func TestVolumeOutlivesSandbox(t *testing.T) {
	if rootErr != nil {
		t.Skip(rootErr)
	}
	srv := s3server.Start(t)
	srv.Env(t)
	st, err := saves.Open(t.Context(), srv.URL(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	base, err := os.MkdirTemp(rootDir, "vol-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o711)
	t.Cleanup(func() { os.RemoveAll(base) })
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	open := func() (*Node, exits) {
		rt, err := runtime.New(runtime.Config{
			StateDir: filepath.Join(base, "sandboxes"), AgentPath: rootAgent, CgroupParent: rootCgroup,
		}, log)
		if err != nil {
			t.Fatal(err)
		}
		ex := make(exits, 16)
		n := New(Config{
			Templates: map[string]image.Image{"busybox": rootImage},
			OutputDir: filepath.Join(base, "output"), OutputMaxBytes: 1 << 20,
			Saves: st,
		}, rt, log, ex.onExit)
		t.Cleanup(func() { n.Close() })
		return n, ex
	}
	n, ex := open()
	ctx := t.Context()
	vol := fmt.Sprintf("vol_local_%d", time.Now().UnixNano())
	ref, err := n.CreateVolume(ctx, vol, 32)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.DropVolume(context.Background(), ref) })
	if ref != (node.VolumeRef{ID: vol}) {
		t.Errorf("ref %+v", ref)
	}
	id := fmt.Sprintf("sbx-vol-%d", time.Now().UnixNano())
	spec := node.SandboxSpec{
		ID: id, Hostname: "vol", Template: "busybox", Pids: 256,
		Resources: api.Resources{CPUs: 1, MemoryMiB: 256, DiskMiB: 64},
		IDs:       node.IDRange{HostID: 1<<30 + 8*65536, Size: 65536},
		Volumes:   []node.VolumeMount{{VolumeRef: ref, Path: "/shared"}},
	}
	if err := n.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Destroy(context.Background(), id) })
	runCmd(t, n, ex, id, "cmd_w", "head -c 8000000 /dev/urandom > /shared/big && echo kept > /shared/kept && sync")
	u, err := n.VolumeUsage(ctx, ref)
	if err != nil || u.UsedBytes < 8000000 || u.SizeBytes < 16<<20 || u.Full {
		t.Errorf("usage %+v %v", u, err)
	}
	if err := n.DropVolume(ctx, ref); api.ErrorCode(err) != api.CodePreconditionFailed {
		t.Errorf("drop while mounted: %v", err)
	}

	// The node restarts: as it stops it unmounts the volume on the host,
	// the sandbox keeps its view.
	n.Close()
	if m, err := mountinfo.Under(filepath.Join(base, "volumes")); err != nil || len(m) != 0 {
		t.Errorf("host mounts of volumes after Close: %v %v", m, err)
	}
	n, ex = open()
	if err := n.DropVolume(ctx, ref); api.ErrorCode(err) != api.CodePreconditionFailed {
		t.Errorf("drop while mounted, after the restart: %v", err)
	}
	if err := n.Attach(ctx, spec, nil); err != nil {
		t.Fatal(err)
	}
	runCmd(t, n, ex, id, "cmd_r", "grep -q kept /shared/kept")
	if u, err := n.VolumeUsage(ctx, ref); err != nil || u.UsedBytes < 8000000 {
		t.Errorf("usage after the restart: %+v %v", u, err)
	}

	// Sleep: the save is the sandbox's own disk, without the volume.
	info, err := n.FinishSleep(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if info.DataBytes >= 8000000 {
		t.Errorf("the save holds %d bytes of data: the volume's files are in it", info.DataBytes)
	}
	if err := n.Wake(ctx, spec); err != nil {
		t.Fatal(err)
	}
	runCmd(t, n, ex, id, "cmd_wake", "grep -q kept /shared/kept && echo more >> /shared/kept")
	if err := n.DropVolume(ctx, ref); api.ErrorCode(err) != api.CodePreconditionFailed {
		t.Errorf("drop while mounted after the wake: %v", err)
	}

	if err := n.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	u2, err := n.VolumeUsage(ctx, ref)
	if err != nil || u2.UsedBytes < 8000000 {
		t.Errorf("usage after the destroy: %+v %v", u2, err)
	}
	// A second sandbox in another range sees the files as user's.
	spec2 := spec
	spec2.ID = id + "-2"
	spec2.IDs = node.IDRange{HostID: 1<<30 + 9*65536, Size: 65536}
	spec2.Volumes = []node.VolumeMount{{VolumeRef: ref, Path: "/v", ReadOnly: true}}
	if err := n.Start(ctx, spec2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Destroy(context.Background(), spec2.ID) })
	runCmd(t, n, ex, spec2.ID, "cmd_2", "test \"$(cat /v/kept)\" = \"$(printf 'kept\\nmore')\" && ! touch /v/x")
	if err := n.Destroy(ctx, spec2.ID); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := n.DropVolume(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.VolumeUsage(ctx, ref); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("usage after the drop: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(base, "volumes", "*")); len(left) > 0 {
		t.Errorf("left after the drop: %s", strings.Join(left, " "))
	}
}

// TestVolumeAdmission: a volume larger than the data disk can hold is
// refused with resource_exhausted before anything is made; one that fits
// is made, and counts among the disks the node has promised.
func TestVolumeAdmission(t *testing.T) {
	if rootErr != nil {
		t.Skip(rootErr)
	}
	base, err := os.MkdirTemp(rootDir, "voladmit-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o711)
	t.Cleanup(func() { os.RemoveAll(base) })
	rt, err := runtime.New(runtime.Config{
		StateDir: filepath.Join(base, "sandboxes"), AgentPath: rootAgent, CgroupParent: rootCgroup,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(rt.StateDir(""), 0o711)
	n := New(Config{
		Templates: map[string]image.Image{"busybox": rootImage},
		OutputDir: filepath.Join(base, "output"), DiskOvercommit: 1,
	}, rt, slog.New(slog.DiscardHandler), exits(make(chan string, 1)).onExit)
	t.Cleanup(func() { n.Close() })
	ctx := t.Context()
	n.capMu.Lock()
	free, _, _, on := n.roomLocked("")
	n.capMu.Unlock()
	if !on {
		t.Fatal("admission is off")
	}
	vol := fmt.Sprintf("vol_big_%d", time.Now().UnixNano())
	if _, err := n.CreateVolume(ctx, vol, free>>20+1024); api.ErrorCode(err) != api.CodeResourceExhausted {
		t.Fatalf("a volume larger than the data disk: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(base, "volumes", "*")); len(left) > 0 {
		t.Errorf("left after a refused create: %v", left)
	}
	ref, err := n.CreateVolume(ctx, vol, 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.DropVolume(context.Background(), ref) })
	n.capMu.Lock()
	promised := n.promisedLocked("")
	n.capMu.Unlock()
	if promised < 8<<20 {
		t.Errorf("promised %d bytes with a 16 MiB volume", promised)
	}
}
