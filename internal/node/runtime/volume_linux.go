package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/mountinfo"
)

// Volumes are a team's disks that outlive sandboxes and that several
// sandboxes of the node mount at once. Each is an ext4 image of its own
// (its size is its quota), mounted once on the host while the node runs
// (UnmountVolumes as it stops; sandboxes' views keep it mounted for them):
//
//	<VolumeDir>/<id>/disk.img  sparse ext4 image: the volume's quota
//	<VolumeDir>/<id>/mnt/      disk.img mounted (nosuid, nodev)
//
// Its files are owned by their IDs as the sandboxes see them (user's
// files by 1000), not by any sandbox's host range: a sandbox mounts an
// idmapped view of mnt shifted into its own range, attached in its state
// dir (<StateDir>/<sandbox>/volume<i>) and bound by runc at the volume's
// path. A write through the view lands with the canonical ID, so every
// other sandbox sees it as its own user's (or root's) file.
//
// The host never looks inside a volume: it mounts, views, measures and
// unmounts it as a whole, so a symlink a sandbox leaves there is only
// ever followed inside a sandbox.

// MaxVolumes bounds the volumes one sandbox mounts.
const MaxVolumes = 16

// MinVolumeMiB is the smallest volume: ext4's journal and metadata need
// a few MiB of it.
const MinVolumeMiB = 16

// VolumeMount is a volume of the node mounted in a sandbox at Path.
type VolumeMount struct {
	// ID names the volume on the node (CreateVolume).
	ID string
	// Path is where the sandbox sees it: absolute, clean, not / nor under
	// /proc, /sys or /dev.
	Path string
	// ReadOnly mounts it read-only: writes fail with EROFS.
	ReadOnly bool
}

func (v VolumeMount) validate() error {
	if !ValidID(v.ID) {
		return fmt.Errorf("volume %q: invalid id", v.ID)
	}
	p := v.Path
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" || strings.ContainsAny(p, "\x00\n") {
		return fmt.Errorf("volume %s: path %q is not a clean absolute path below /", v.ID, p)
	}
	for _, no := range []string{"/proc", "/sys", "/dev"} {
		if p == no || strings.HasPrefix(p, no+"/") {
			return fmt.Errorf("volume %s: path %q is under %s", v.ID, p, no)
		}
	}
	return nil
}

// fullMargin is the free space below which a volume counts as full:
// ext4 refuses a write with ENOSPC while it still has some free blocks,
// which it keeps for the metadata of writes it has not allocated yet.
const fullMargin = 1 << 20

// VolumeUsage is what the node measures of a volume's filesystem.
type VolumeUsage struct {
	SizeBytes int64
	UsedBytes int64
	// Full: less than fullMargin, or 1/128 of the size, is left, or no
	// inode: a write may fail with ENOSPC.
	Full bool
}

// volumeView is where a sandbox's i-th volume view is attached.
const volumeView = "volume"

// volumeLocks orders the making, mounting and removal of each volume.
var volumeLocks sync.Map // id -> *sync.Mutex

func volumeLock(id string) *sync.Mutex {
	m, _ := volumeLocks.LoadOrStore(id, &sync.Mutex{})
	return m.(*sync.Mutex)
}

func (r *Runtime) volumeDir(id string) string { return filepath.Join(r.cfg.VolumeDir, id) }

// CreateVolume makes volume id, an empty ext4 of sizeMiB, and mounts it.
// A volume already there is kept (whatever its size): it is idempotent.
func (r *Runtime) CreateVolume(ctx context.Context, id string, sizeMiB int64) error {
	if !ValidID(id) {
		return api.Errorf(api.CodeInvalidArgument, "volume id %q: invalid", id)
	}
	if sizeMiB < MinVolumeMiB {
		return api.Errorf(api.CodeInvalidArgument, "volume %s: size %d MiB: want at least %d", id, sizeMiB, MinVolumeMiB)
	}
	mu := volumeLock(id)
	mu.Lock()
	defer mu.Unlock()
	dir := r.volumeDir(id)
	if _, err := os.Stat(filepath.Join(dir, diskImage)); err == nil {
		_, err := r.mountVolumeLocked(id)
		return err
	}
	if err := os.MkdirAll(r.cfg.VolumeDir, 0o700); err != nil {
		return fmt.Errorf("create volume %s: %w", id, err)
	}
	// Made aside and renamed into place: a crash leaves either no volume
	// or a whole one.
	tmp := filepath.Join(r.cfg.VolumeDir, ".new-"+id)
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("create volume %s: %w", id, err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("create volume %s: %w", id, err)
	}
	if err := makeDisk(ctx, filepath.Join(tmp, diskImage), sizeMiB, 0, 0); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("create volume %s: %w", id, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("create volume %s: %w", id, err)
	}
	mnt, err := r.mountVolumeLocked(id)
	if err != nil {
		return err
	}
	// Open to every user of a sandbox, as /tmp is: each may add files,
	// and remove only its own.
	if err := unix.Chmod(mnt, 0o1777); err != nil {
		return fmt.Errorf("create volume %s: %w", id, err)
	}
	return nil
}

// mountVolumeLocked mounts volume id on the host unless it is mounted
// already (a restart of the node keeps the mount; a reboot does not), and
// returns its mount point. The volume's lock is held.
func (r *Runtime) mountVolumeLocked(id string) (string, error) {
	dir := r.volumeDir(id)
	img, mnt := filepath.Join(dir, diskImage), filepath.Join(dir, "mnt")
	if _, err := os.Stat(img); err != nil {
		return "", api.Errorf(api.CodeNotFound, "volume %s is not on this node", id)
	}
	mounted, err := mountinfo.Under(mnt)
	if err != nil {
		return "", err
	}
	if len(mounted) > 0 {
		return mnt, nil
	}
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return "", err
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV
	// Sandboxes' views may hold the volume's loop device still (its host
	// mount was taken away under them): mount that device again, never
	// a second one, which would be a second ext4 over the same image.
	devs, err := loopsBackedBy(img)
	if err != nil {
		return "", err
	}
	if len(devs) > 0 {
		if err := unix.Mount(devs[0], mnt, "ext4", flags, ""); err != nil {
			return "", fmt.Errorf("mount volume %s from %s: %w", id, devs[0], err)
		}
		return mnt, nil
	}
	if err := mountLoop(img, mnt, flags, false); err != nil {
		return "", fmt.Errorf("mount volume %s: %w", id, err)
	}
	return mnt, nil
}

// UnmountVolumes unmounts every volume's host mount, as the node stops:
// sandboxes that mount a volume keep their views of it (the kernel keeps
// its filesystem, and loop device, while one is left), and the next start
// or measure mounts it again, from that device if it is still there.
func (r *Runtime) UnmountVolumes() error {
	entries, err := os.ReadDir(r.cfg.VolumeDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !ValidID(e.Name()) {
			continue
		}
		mu := volumeLock(e.Name())
		mu.Lock()
		if err := unmount(filepath.Join(r.volumeDir(e.Name()), "mnt")); err != nil {
			errs = append(errs, err)
		}
		mu.Unlock()
	}
	return errors.Join(errs...)
}

// DropVolume unmounts and deletes volume id. A volume a sandbox of the
// node mounts is refused (precondition_failed); a missing one is no error.
func (r *Runtime) DropVolume(ctx context.Context, id string) error {
	if !ValidID(id) {
		return api.Errorf(api.CodeInvalidArgument, "volume id %q: invalid", id)
	}
	mu := volumeLock(id)
	mu.Lock()
	defer mu.Unlock()
	dir := r.volumeDir(id)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	users, err := r.volumeUsersLocked(id)
	if err != nil {
		return fmt.Errorf("drop volume %s: %w", id, err)
	}
	if len(users) > 0 {
		return api.Errorf(api.CodePreconditionFailed, "volume %s is mounted by sandboxes %s", id, strings.Join(users, ", "))
	}
	img := filepath.Join(dir, diskImage)
	if err := unmount(filepath.Join(dir, "mnt")); err != nil {
		return fmt.Errorf("drop volume %s: %w", id, err)
	}
	detachLoops(img)
	if err := removeStateDir(dir); err != nil {
		return fmt.Errorf("drop volume %s: %w", id, err)
	}
	return nil
}

// VolumeUsers lists the sandboxes of the node that mount volume id.
func (r *Runtime) VolumeUsers(id string) ([]string, error) {
	if !ValidID(id) {
		return nil, api.Errorf(api.CodeInvalidArgument, "volume id %q: invalid", id)
	}
	mu := volumeLock(id)
	mu.Lock()
	defer mu.Unlock()
	return r.volumeUsersLocked(id)
}

// volumeUsersLocked finds the sandboxes whose state dirs hold a view of
// volume id: mounts of the loop devices backed by its image, other than
// its own mount point.
func (r *Runtime) volumeUsersLocked(id string) ([]string, error) {
	devs, err := loopsBackedBy(filepath.Join(r.volumeDir(id), diskImage))
	if err != nil {
		return nil, err
	}
	var nums []string
	for _, d := range devs {
		b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(d), "dev"))
		if err == nil {
			nums = append(nums, strings.TrimSpace(string(b)))
		}
	}
	if len(nums) == 0 {
		return nil, nil
	}
	mounts, err := mountinfo.OfDevice(nums...)
	if err != nil {
		return nil, err
	}
	var users []string
	state := filepath.Clean(r.cfg.StateDir) + "/"
	for _, m := range mounts {
		rest, ok := strings.CutPrefix(m, state)
		if !ok {
			continue
		}
		sbx, view, _ := strings.Cut(rest, "/")
		if ValidID(sbx) && strings.HasPrefix(view, volumeView) {
			users = append(users, sbx)
		}
	}
	slices.Sort(users)
	return slices.Compact(users), nil
}

// VolumeUsage measures volume id's filesystem, mounting it if need be.
func (r *Runtime) VolumeUsage(ctx context.Context, id string) (VolumeUsage, error) {
	if !ValidID(id) {
		return VolumeUsage{}, api.Errorf(api.CodeInvalidArgument, "volume id %q: invalid", id)
	}
	mu := volumeLock(id)
	mu.Lock()
	defer mu.Unlock()
	mnt, err := r.mountVolumeLocked(id)
	if err != nil {
		return VolumeUsage{}, err
	}
	// Flushed first: blocks reserved for writes not yet allocated count
	// as used until then, and more than they will take.
	if err := syncDir(mnt); err != nil {
		return VolumeUsage{}, fmt.Errorf("measure volume %s: %w", id, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		return VolumeUsage{}, fmt.Errorf("measure volume %s: %w", id, err)
	}
	bs := int64(st.Bsize)
	size, avail := int64(st.Blocks)*bs, int64(st.Bavail)*bs
	return VolumeUsage{
		SizeBytes: size,
		UsedBytes: int64(st.Blocks-st.Bfree) * bs,
		Full:      avail < max(fullMargin, size/128) || st.Ffree == 0,
	}, nil
}

// VolumeImages lists the disk images of the node's volumes: sparse files
// on the data disk that grow as volumes fill.
func (r *Runtime) VolumeImages() []string {
	imgs, _ := filepath.Glob(filepath.Join(r.cfg.VolumeDir, "*", diskImage))
	return imgs
}

// HasVolume reports whether the node holds volume id.
func (r *Runtime) HasVolume(id string) bool {
	if !ValidID(id) {
		return false
	}
	_, err := os.Stat(filepath.Join(r.volumeDir(id), diskImage))
	return err == nil
}

// volumeMounts attaches a view of each of s's volumes, shifted into s's
// range, at <dir>/volume<i>, and returns the runc mounts that bind them
// at their paths.
func (r *Runtime) volumeMounts(dir string, s Spec) ([]specs.Mount, error) {
	var out []specs.Mount
	for i, v := range s.Volumes {
		target := filepath.Join(dir, fmt.Sprintf("%s%d", volumeView, i))
		if err := r.attachVolume(v.ID, target, s); err != nil {
			return nil, err
		}
		opts := []string{"bind", "nosuid", "nodev"}
		if v.ReadOnly {
			opts = append(opts, "ro")
		}
		out = append(out, specs.Mount{Destination: v.Path, Type: "bind", Source: target, Options: opts})
	}
	return out, nil
}

// attachVolume mounts volume id on the host if need be and attaches its
// view in s's range at target, under the volume's lock, so that a drop
// either sees the view or comes first (and the start fails: not found).
func (r *Runtime) attachVolume(id, target string, s Spec) error {
	mu := volumeLock(id)
	mu.Lock()
	defer mu.Unlock()
	mnt, err := r.mountVolumeLocked(id)
	if err != nil {
		return err
	}
	if err := os.Mkdir(target, 0o700); err != nil {
		return err
	}
	// The view is writable; runc's bind of it adds ro for a read-only
	// mount, in the sandbox's own mount namespace.
	ids := idShift{From: 0, HostID: s.IDs.HostID, Size: s.IDs.Size}
	if err := r.mountView(mnt, target, ids, 0); err != nil {
		return fmt.Errorf("mount volume %s: %w", id, err)
	}
	return nil
}

// unmountVolumeViews undoes volumeMounts' views in a sandbox's state dir.
func unmountVolumeViews(dir string) error {
	views, err := filepath.Glob(filepath.Join(dir, volumeView+"*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range views {
		if err := unmount(v); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
