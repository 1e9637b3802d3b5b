package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/fsfreeze"
	"github.com/cove-dev/cove/internal/node/image"
)

// treeSum is a script printing the sha-256 of a tree: every file's path,
// owner, mode and content.
const treeSum = `cd /workspace && find . -type f | sort | while read f; do stat -c '%n %u:%g %a' "$f"; sha256sum < "$f"; done | sha256sum | cut -d' ' -f1`

// allocated is the bytes a file takes on the host's disk.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// TestForkOnLayer freezes a running sandbox holding 100 MiB of files into
// a layer and starts five sandboxes on it, each in a range of its own:
// their trees are byte-identical to the parent's, owned by their own
// user, a write in one shows nowhere else, a file the parent removed from
// the image stays removed, and their disks hold only their own writes.
func TestForkOnLayer(t *testing.T) {
	r := newRuntime(t)
	const mib = 100
	parent := testSpec()
	parent.DiskMiB = 256
	parent.IDs = image.IDMap{HostID: 1<<30 + 10*65536, Size: 65536}
	pc := start(t, r, parent)
	script := fmt.Sprintf(`set -e
mkdir -p /workspace/data/deep && cd /workspace/data
for i in $(seq 1 %d); do dd if=/dev/urandom of=f$i bs=1M count=1 2>/dev/null; done
echo small > deep/s && ln -s deep/s link && rm /etc/hostname`, mib)
	if out, exit := sh(t, pc, 1000, "true"); exit.ExitCode != 0 {
		t.Fatal(out)
	}
	if out, exit := sh(t, pc, 0, script+" && chown -R 1000:1000 /workspace/data"); exit.ExitCode != 0 {
		t.Fatalf("fill the parent: %s", out)
	}
	want, _ := sh(t, pc, 0, treeSum)

	tmp, err := r.LayerTemp("snap-t1")
	if err != nil {
		t.Fatal(err)
	}
	n, err := r.Freeze(t.Context(), parent.ID, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if n < mib<<20 {
		t.Errorf("froze %d bytes, want at least %d", n, mib<<20)
	}
	// The parent goes on writing once thawed.
	if out, exit := sh(t, pc, 0, "echo after > /workspace/after && cat /workspace/after"); exit.ExitCode != 0 || out != "after" {
		t.Fatalf("parent after freeze: %q", out)
	}
	if err := r.AddLayer(t.Context(), "snap-t1", tmp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.RemoveLayer(t.Context(), "snap-t1"); err != nil {
			t.Error(err)
		}
	})

	var forks []Spec
	var clients []*client.Client
	for i := range 5 {
		s := testSpec()
		s.DiskMiB = 256
		s.IDs = image.IDMap{HostID: 1<<30 + uint32(11+i)*65536, Size: 65536}
		s.Layers = []Layer{{Name: "snap-t1", IDs: parent.IDs}}
		forks = append(forks, s)
		clients = append(clients, start(t, r, s))
	}
	for i, c := range clients {
		if got, _ := sh(t, c, 0, treeSum); got != want {
			t.Errorf("fork %d: tree sum %s, want the parent's %s", i, got, want)
		}
		if out, _ := sh(t, c, 0, "stat -c %u:%g /workspace/data/f1 /workspace/data/deep; readlink /workspace/data/link; ls /etc/hostname 2>&1; ls /workspace/after 2>&1"); out != "1000:1000\n1000:1000\ndeep/s\nls: /etc/hostname: No such file or directory\nls: /workspace/after: No such file or directory" {
			t.Errorf("fork %d sees %q", i, out)
		}
		if out, exit := sh(t, c, 1000, "echo mine >> /workspace/data/deep/s && cat /workspace/data/deep/s"); exit.ExitCode != 0 || out != "small\nmine" {
			t.Errorf("fork %d: user writes a layer's file: %q", i, out)
		}
		// Its copy is its own range's user on the host.
		upper := filepath.Join(r.StateDir(forks[i].ID), diskDir, "upper", "workspace/data/deep/s")
		if uid, gid := hostOwner(t, upper); uid != forks[i].IDs.HostID+1000 || gid != forks[i].IDs.HostID+1000 {
			t.Errorf("fork %d: host owner of its copy %d:%d", i, uid, gid)
		}
	}
	if out, _ := sh(t, clients[0], 0, "echo only0 > /workspace/data/f1 && cat /workspace/data/f1"); out != "only0" {
		t.Fatalf("fork 0 write: %q", out)
	}
	for i, c := range append(clients[1:], pc) {
		if out, _ := sh(t, c, 0, "head -c 5 /workspace/data/f1 | grep -c only0"); out != "0" {
			t.Errorf("sandbox %d sees fork 0's write", i+1)
		}
	}
	if out, _ := sh(t, pc, 0, "cat /workspace/data/deep/s"); out != "small" {
		t.Errorf("parent sees a fork's append: %q", out)
	}
	// Disks: the layer once, each fork only what it wrote.
	layer := allocated(t, filepath.Join(r.layerDir("snap-t1"), diskImage))
	var forksBytes int64
	for _, s := range forks {
		forksBytes += allocated(t, filepath.Join(r.StateDir(s.ID), diskImage))
	}
	t.Logf("layer %d MiB, 5 forks' disks %d MiB together", layer>>20, forksBytes>>20)
	if forksBytes > layer/2 {
		t.Errorf("5 forks' disks take %d bytes, the layer %d: the files were copied", forksBytes, layer)
	}

	// A layer of a fork stacks on the layer it stands on.
	tmp2, err := r.LayerTemp("snap-t2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Freeze(t.Context(), forks[0].ID, tmp2); err != nil {
		t.Fatal(err)
	}
	if err := r.AddLayer(t.Context(), "snap-t2", tmp2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.RemoveLayer(t.Context(), "snap-t2") })
	g := testSpec()
	g.IDs = image.IDMap{HostID: 1<<30 + 20*65536, Size: 65536}
	g.Layers = []Layer{{Name: "snap-t2", IDs: forks[0].IDs}, {Name: "snap-t1", IDs: parent.IDs}}
	gc := start(t, r, g)
	if out, _ := sh(t, gc, 0, "cat /workspace/data/f1 /workspace/data/deep/s; stat -c %u:%g /workspace/data/f1 /workspace/data/f2"); out != "only0\nsmall\nmine\n1000:1000\n1000:1000" {
		t.Errorf("grandchild sees %q", out)
	}
	// The layers' host paths and names stay out of the sandbox's view (its
	// mounts name its own state dir only, as every sandbox's do).
	if out, _ := sh(t, gc, 0, "cat /proc/self/mountinfo"); strings.Contains(out, layersDir) || strings.Contains(out, "snap-t") {
		t.Errorf("mountinfo names host paths:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(r.StateDir(g.ID), "layer0")); err != nil {
		t.Error(err)
	}
}

// TestAttachThaws: a disk left frozen by a node that died mid-snapshot is
// thawed when the next node attaches to the sandbox.
func TestAttachThaws(t *testing.T) {
	r := newRuntime(t)
	s := testSpec()
	c := start(t, r, s)
	if err := fsfreeze.Freeze(filepath.Join(r.StateDir(s.ID), diskDir)); err != nil {
		t.Fatal(err)
	}
	c2, err := r.Attach(t.Context(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if out, exit := sh(t, c, 0, "echo thawed > /root/t && cat /root/t"); exit.ExitCode != 0 || out != "thawed" {
		t.Errorf("write after attach: %q", out)
	}
}
