package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/mountinfo"

	"golang.org/x/sys/unix"
)

// ensure returns the image called name under imagesDir, making it when it
// is absent: converted from a format 1 image of that name when there is
// one, else built with build (nil: there is nothing to build). build fills
// rootfs (an empty directory) and returns the image's shell. Makers of the
// same image are serialized by a lock file; the tree is made in a
// temporary directory beside the final one and renamed into place with
// its image.json.
func ensure(ctx context.Context, imagesDir, name string, log *slog.Logger,
	build func(ctx context.Context, rootfs string) (shell []string, err error),
) (Image, error) {
	if err := checkName(name); err != nil {
		return Image{}, err
	}
	if img, err := Load(imagesDir, name); !errors.Is(err, ErrNotFound) {
		return img, err
	}
	dir, err := formatRoot(imagesDir)
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	unlock, err := lock(ctx, filepath.Join(dir, "."+name+".lock"))
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	defer unlock()
	// Someone else may have built it while we waited for the lock.
	if img, err := Load(imagesDir, name); !errors.Is(err, ErrNotFound) {
		return img, err
	}

	final := filepath.Join(dir, name)
	// Leftovers of interrupted builds, and a final directory without its
	// image.json (never written by us, but possible by hand).
	stale, _ := filepath.Glob(filepath.Join(dir, "."+name+".tmp-*"))
	if _, err := os.Lstat(final); err == nil {
		stale = append(stale, final)
	}
	for _, d := range stale {
		log.Info("removing incomplete image", "dir", d)
		if err := removeTree(d); err != nil {
			return Image{}, fmt.Errorf("build image %s: %w", name, err)
		}
	}

	tmp, err := os.MkdirTemp(dir, "."+name+".tmp-")
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
	var shell []string
	if old, ok := loadLegacy(imagesDir, name); ok {
		start := time.Now()
		if err := convert(ctx, old, rootfs); err != nil {
			return Image{}, fmt.Errorf("convert image %s of format 1: %w", name, err)
		}
		log.Info("converted image of format 1", "image", name, "from", old.Dir, "took", time.Since(start).Round(time.Millisecond))
		shell = old.Shell
	} else {
		if build == nil {
			return Image{}, fmt.Errorf("load image %s from %s: %w", name, imagesDir, ErrNotFound)
		}
		if err := os.Mkdir(rootfs, 0o755); err != nil {
			return Image{}, fmt.Errorf("build image %s: %w", name, err)
		}
		if shell, err = build(ctx, rootfs); err != nil {
			return Image{}, fmt.Errorf("build image %s: %w", name, err)
		}
	}
	if err := addAgentMountPoint(rootfs); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", name, err)
	}
	img := Image{Name: name, Shell: shell, Format: Format}
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

// formatRoot makes <imagesDir>/v2, 0700: image trees keep host root's
// set-uid binaries, which no other host user may reach. Sandboxes reach
// them only through their overlay, whose lower layer is looked up with the
// mounter's (host root's) rights.
func formatRoot(imagesDir string) (string, error) {
	if err := os.MkdirAll(imagesDir, 0o711); err != nil {
		return "", err
	}
	dir := filepath.Join(imagesDir, formatDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", err
	}
	return dir, nil
}

// legacyImage is an image of format 1: <imagesDir>/<name>, its IDs shifted.
type legacyImage struct {
	Name   string   `json:"name"`
	Shell  []string `json:"shell"`
	Format int      `json:"format"`
	IDs    IDMap    `json:"ids"`
	Dir    string   `json:"-"`
}

// loadLegacy finds a complete image of format 1 called name.
func loadLegacy(imagesDir, name string) (legacyImage, bool) {
	dir := filepath.Join(imagesDir, name)
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return legacyImage{}, false
	}
	var old legacyImage
	if err := json.Unmarshal(b, &old); err != nil || old.Format != 0 || old.Name != name || len(old.Shell) == 0 {
		return legacyImage{}, false
	}
	old.IDs = old.IDs.OrLegacy()
	if old.IDs.Validate() != nil {
		return legacyImage{}, false
	}
	if st, err := os.Stat(filepath.Join(dir, rootfsDir)); err != nil || !st.IsDir() {
		return legacyImage{}, false
	}
	old.Dir = dir
	return old, true
}

// convert copies the tree of a format 1 image to rootfs (which must not
// exist) and shifts its IDs back. The old image is only read.
func convert(ctx context.Context, old legacyImage, rootfs string) error {
	cmd := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", "--", filepath.Join(old.Dir, rootfsDir), rootfs)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s: %w: %s", old.Dir, err, tail(out, 5))
	}
	return Unshift(ctx, rootfs, old.IDs)
}

// Convert makes an image of the current format from each image of format
// 1 in imagesDir that has none yet, and reports their names. The old
// directories stay as they are: older servers may share the images dir.
func Convert(ctx context.Context, imagesDir string, log *slog.Logger) ([]string, error) {
	entries, err := os.ReadDir(imagesDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("convert images: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() || checkName(e.Name()) != nil || e.Name() == formatDir {
			continue
		}
		if _, ok := loadLegacy(imagesDir, e.Name()); !ok {
			continue
		}
		if _, err := Load(imagesDir, e.Name()); err == nil {
			continue
		}
		if _, err := ensure(ctx, imagesDir, e.Name(), log, nil); err != nil {
			return names, err
		}
		names = append(names, e.Name())
	}
	return names, nil
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
