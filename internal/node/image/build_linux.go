package image

import (
	"context"
	"errors"
	"fmt"
	"github.com/cove-dev/cove/internal/mountinfo"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ensure returns the image called name under imagesDir, building it with
// build when it is absent. build fills rootfs (an empty directory) and
// returns the image's shell. Builds of the same image are serialized by a
// lock file; the tree is built in a temporary directory beside the final
// one, shifted to ids, and renamed into place with its image.json.
func ensure(ctx context.Context, imagesDir, name string, ids IDMap, log *slog.Logger,
	build func(ctx context.Context, rootfs string) (shell []string, err error),
) (Image, error) {
	ids = ids.OrDefault()
	if err := ids.Validate(); err != nil {
		return Image{}, err
	}
	if err := checkName(name); err != nil {
		return Image{}, err
	}
	if img, err := loadMatching(imagesDir, name, ids); !errors.Is(err, ErrNotFound) {
		return img, err
	}
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	unlock, err := lock(ctx, filepath.Join(imagesDir, "."+name+".lock"))
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	defer unlock()
	// Someone else may have built it while we waited for the lock.
	if img, err := loadMatching(imagesDir, name, ids); !errors.Is(err, ErrNotFound) {
		return img, err
	}

	final := filepath.Join(imagesDir, name)
	// Leftovers of interrupted builds, and a final directory without its
	// image.json (never written by us, but possible by hand).
	stale, _ := filepath.Glob(filepath.Join(imagesDir, "."+name+".tmp-*"))
	if _, err := os.Lstat(final); err == nil {
		stale = append(stale, final)
	}
	for _, dir := range stale {
		log.Info("removing incomplete image", "dir", dir)
		if err := removeTree(dir); err != nil {
			return Image{}, fmt.Errorf("build image %s: %w", name, err)
		}
	}

	tmp, err := os.MkdirTemp(imagesDir, "."+name+".tmp-")
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	done := false
	defer func() {
		if !done {
			if err := removeTree(tmp); err != nil {
				log.Warn("remove incomplete image", "dir", tmp, "err", err)
			}
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	rootfs := filepath.Join(tmp, rootfsDir)
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	shell, err := build(ctx, rootfs)
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	if err := addAgentMountPoint(rootfs); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	if err := Shift(ctx, rootfs, ids); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	img := Image{Name: name, Shell: shell, IDs: ids}
	if err := writeMeta(tmp, img); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	unix.Sync()
	if err := os.Rename(tmp, final); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	done = true
	return Load(imagesDir, name)
}

// addAgentMountPoint makes the empty file the agent is mounted on; paths
// resolve inside the tree.
func addAgentMountPoint(rootfs string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	p := strings.TrimPrefix(AgentMountPoint, "/")
	if err := root.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := root.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	return f.Close()
}

// loadMatching loads an image and checks it was shifted to ids.
func loadMatching(imagesDir, name string, ids IDMap) (Image, error) {
	img, err := Load(imagesDir, name)
	if err != nil {
		return Image{}, err
	}
	if img.IDs != ids {
		return Image{}, fmt.Errorf("image %s is shifted to %+v, not %+v: remove %s to rebuild it",
			name, img.IDs, ids, img.Dir)
	}
	return img, nil
}

// lock takes an exclusive flock on path, waiting until ctx is done.
func lock(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// removeTree removes dir, first checking that nothing is mounted under it:
// removing through a bind mount would delete the files of the mount source.
func removeTree(dir string) error {
	mounts, err := mountinfo.Under(dir)
	if err != nil {
		return err
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := unix.Unmount(mounts[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", mounts[i], err)
		}
	}
	if mounts, err = mountinfo.Under(dir); err != nil {
		return err
	} else if len(mounts) > 0 {
		return fmt.Errorf("remove %s: still mounted: %s", dir, strings.Join(mounts, ", "))
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
