package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fsfreeze"
	"github.com/cove-dev/cove/internal/mountinfo"
	"github.com/cove-dev/cove/internal/node/image"
)

// Layers are frozen copies of sandboxes' disks (snapshots) that other
// sandboxes start on: each is a disk image kept once on the node and
// mounted read-only, and its upper directory is an overlay lower layer,
// between the image and the sandbox's own upper, of every sandbox that
// stands on it. A fork of a sandbox with 1 GiB of files thus costs what a
// fork of an empty one does; its own writes go to its own disk.
//
//	<StateDir>/.layers/<name>/disk.img  the frozen disk
//	<StateDir>/.layers/<name>/mnt/      disk.img mounted read-only
//
// A layer's files keep the host IDs of the sandbox that wrote them; each
// sandbox sees them through an idmapped mount shifted into its own range.

const layersDir = ".layers"

// Layer is a frozen disk a sandbox stands on.
type Layer struct {
	// Name is the layer's name on the node (a snapshot's ID).
	Name string
	// IDs is the range its files were written in.
	IDs image.IDMap
}

// layerLocks orders the mounting and removal of each layer.
var layerLocks sync.Map // name -> *sync.Mutex

func layerLock(name string) *sync.Mutex {
	m, _ := layerLocks.LoadOrStore(name, &sync.Mutex{})
	return m.(*sync.Mutex)
}

func (r *Runtime) layerDir(name string) string {
	return filepath.Join(r.cfg.StateDir, layersDir, name)
}

// HasLayer reports whether the node holds layer name.
func (r *Runtime) HasLayer(name string) bool {
	if !ValidID(name) {
		return false
	}
	_, err := os.Stat(filepath.Join(r.layerDir(name), diskImage))
	return err == nil
}

// AddLayer takes the disk image img (moved, so on the same filesystem as
// the state dir) as layer name. A layer already there is kept and img is
// removed.
func (r *Runtime) AddLayer(ctx context.Context, name, img string) error {
	if !ValidID(name) {
		return api.Errorf(api.CodeInvalidArgument, "layer %q: invalid name", name)
	}
	mu := layerLock(name)
	mu.Lock()
	defer mu.Unlock()
	dir := r.layerDir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	dst := filepath.Join(dir, diskImage)
	if _, err := os.Stat(dst); err == nil {
		return os.Remove(img)
	}
	if err := os.Rename(img, dst); err != nil {
		return fmt.Errorf("add layer %s: %w", name, err)
	}
	return nil
}

// LayerTemp is a new path, where no file is, on the state dir's
// filesystem for a disk image about to become layer name (AddLayer).
func (r *Runtime) LayerTemp(name string) (string, error) {
	dir := filepath.Join(r.cfg.StateDir, layersDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "."+name+"-*.img")
	if err != nil {
		return "", err
	}
	f.Close()
	return f.Name(), os.Remove(f.Name())
}

// mountLayer mounts layer name read-only, once, and returns the host path
// of its upper directory.
func (r *Runtime) mountLayer(name string) (string, error) {
	if !ValidID(name) {
		return "", fmt.Errorf("layer %q: invalid name", name)
	}
	mu := layerLock(name)
	mu.Lock()
	defer mu.Unlock()
	dir := r.layerDir(name)
	img, mnt := filepath.Join(dir, diskImage), filepath.Join(dir, "mnt")
	if _, err := os.Stat(img); err != nil {
		return "", api.Errorf(api.CodeNotFound, "layer %s is not on this node", name)
	}
	upper := filepath.Join(mnt, "upper")
	mounted, err := mountinfo.Under(mnt)
	if err != nil {
		return "", err
	}
	if len(mounted) > 0 {
		return upper, nil
	}
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return "", err
	}
	if err := mountLoop(img, mnt, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, false); err != nil {
		return "", fmt.Errorf("mount layer %s: %w", name, err)
	}
	if _, err := os.Stat(upper); err != nil {
		unmount(mnt)
		return "", fmt.Errorf("layer %s holds no upper layer: %w", name, err)
	}
	return upper, nil
}

// RemoveLayer unmounts and deletes layer name. Sandboxes standing on it
// keep their own views of it until they go; a missing layer is no error.
func (r *Runtime) RemoveLayer(ctx context.Context, name string) error {
	if !ValidID(name) {
		return api.Errorf(api.CodeInvalidArgument, "layer %q: invalid name", name)
	}
	mu := layerLock(name)
	mu.Lock()
	defer mu.Unlock()
	dir := r.layerDir(name)
	if err := unmount(filepath.Join(dir, "mnt")); err != nil {
		return err
	}
	detachLoops(filepath.Join(dir, diskImage))
	return removeStateDir(dir)
}

// UnmountLayers unmounts every layer's shared mount, as the node stops:
// the sandboxes on a layer keep their own views of it (the kernel keeps
// its filesystem while one is left), and the next start on it mounts it
// again.
func (r *Runtime) UnmountLayers() error {
	names, err := r.Layers()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		mu := layerLock(name)
		mu.Lock()
		if err := unmount(filepath.Join(r.layerDir(name), "mnt")); err != nil {
			errs = append(errs, err)
		}
		mu.Unlock()
	}
	return errors.Join(errs...)
}

// Layers lists the layers the node holds.
func (r *Runtime) Layers() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(r.cfg.StateDir, layersDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && ValidID(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Freeze copies running sandbox id's disk image to dst as it is at one
// moment, sparse: its filesystem is frozen for the copy (writes wait, the
// sandbox's processes go on) and thawed after. It returns the bytes of data
// copied.
func (r *Runtime) Freeze(ctx context.Context, id, dst string) (int64, error) {
	if !ValidID(id) {
		return 0, api.Errorf(api.CodeInvalidArgument, "sandbox id %q: invalid", id)
	}
	dir := r.StateDir(id)
	disk := filepath.Join(dir, diskDir)
	if _, err := os.Stat(disk); err != nil {
		return 0, fmt.Errorf("freeze sandbox %s: %w", id, err)
	}
	if m, err := mountinfo.Under(disk); err != nil || len(m) == 0 {
		return 0, api.Errorf(api.CodeConflict, "freeze sandbox %s: its disk is not mounted", id)
	}
	var n int64
	err := fsfreeze.Do(disk, func() (err error) {
		n, err = sparseCopy(ctx, filepath.Join(dir, diskImage), dst)
		return err
	})
	if err != nil {
		os.Remove(dst)
		return 0, fmt.Errorf("freeze sandbox %s: %w", id, err)
	}
	return n, nil
}

// thaw thaws the filesystem mounted at dir if it is frozen.
func thaw(dir string) {
	fsfreeze.Thaw(dir) // one not frozen refuses, which is fine
}

// sparseCopy copies the data extents of src to a new file dst of the same
// size, leaving holes as holes.
func sparseCopy(ctx context.Context, src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return 0, err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := copyExtents(ctx, in, out, st.Size())
	if err == nil {
		err = out.Truncate(st.Size())
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return n, err
}

// copyExtents copies the data extents of in to out at the same offsets,
// leaving holes, and blocks of zeros, as holes: a disk's inode tables the
// kernel zeroed in the background take no room in the copy.
func copyExtents(ctx context.Context, in, out *os.File, size int64) (int64, error) {
	const block = 64 << 10
	buf := make([]byte, 1<<20)
	var total int64
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return total, err
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return total, err
		}
		for pos := data; pos < hole; {
			n, err := in.ReadAt(buf[:min(int64(len(buf)), hole-pos)], pos)
			if n == 0 && err != nil {
				return total, err
			}
			for b := 0; b < n; b += block {
				chunk := buf[b:min(b+block, n)]
				if allZero(chunk) {
					continue
				}
				if _, err := out.WriteAt(chunk, pos+int64(b)); err != nil {
					return total, err
				}
				total += int64(len(chunk))
			}
			pos += int64(n)
		}
		off = hole
	}
	return total, nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// layerMounts mounts the view of each of s's layers, shifted into s's
// range, at <dir>/layer<i>, and returns their paths for lowerdir, top
// first.
func (r *Runtime) layerMounts(dir string, s Spec) ([]string, error) {
	var paths []string
	for i, l := range s.Layers {
		upper, err := r.mountLayer(l.Name)
		if err != nil {
			return nil, err
		}
		target := filepath.Join(dir, fmt.Sprintf("layer%d", i))
		if err := os.Mkdir(target, 0o700); err != nil {
			return nil, err
		}
		from := l.IDs.OrLegacy()
		if err := r.mountShifted(upper, target, idShift{From: from.HostID, HostID: s.IDs.HostID, Size: min(from.Size, s.IDs.Size)}); err != nil {
			return nil, fmt.Errorf("mount layer %s: %w", l.Name, err)
		}
		paths = append(paths, target)
	}
	return paths, nil
}

// unmountLayerViews undoes layerMounts' views left attached (the overlay
// keeps private clones of them).
func unmountLayerViews(dir string) error {
	views, err := filepath.Glob(filepath.Join(dir, "layer*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range views {
		if !strings.HasPrefix(filepath.Base(v), "layer") {
			continue
		}
		if err := unmount(v); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
