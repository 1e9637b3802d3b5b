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
	return ensureRecipe(ctx, imagesDir, name, "", log, build)
}

// ensureRecipe is ensure for an image built from recipe ("" for none): one
// of another recipe (or of none) is built again and replaces it. The tree
// it replaces is renamed to .<name>.old-*, not removed: sandboxes started
// on it keep running on it.
func ensureRecipe(ctx context.Context, imagesDir, name, recipe string, log *slog.Logger,
	build func(ctx context.Context, rootfs string) (shell []string, err error),
) (Image, error) {
	var fill func(ctx context.Context, rootfs string) (Image, error)
	if build != nil {
		fill = func(ctx context.Context, rootfs string) (Image, error) {
			shell, err := build(ctx, rootfs)
			return Image{Shell: shell}, err
		}
	}
	img, _, err := makeImage(ctx, imagesDir, name, "."+name+".lock", recipe, log, fill)
	return img, err
}

// importLock is the lock file of imported images: one for them all, made
// when the images dir is opened for imports (PrepareImports), so that an
// import that fails leaves the images dir as it found it.
const importLock = ".imports.lock"

// PrepareImports makes the images dir ready for Import.
func PrepareImports(imagesDir string) error {
	dir, err := formatRoot(imagesDir)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, importLock), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// StageImport makes the imported image called name in tree, an empty
// directory of the caller's under the images dir (so that CommitImport's
// rename stays on one filesystem) that no one else uses: fill fills
// rootfs (an empty directory in it) and returns the image's shell and
// config. It returns the image as stored in tree's image.json. It takes no lock: a slow unpack stalls no one but its caller.
func StageImport(ctx context.Context, tree, name string,
	fill func(ctx context.Context, rootfs string) (Image, error),
) (Image, error) {
	if err := checkName(name); err != nil {
		return Image{}, err
	}
	if err := os.Chmod(tree, 0o755); err != nil {
		return Image{}, fmt.Errorf("stage image %s: %w", name, err)
	}
	rootfs := filepath.Join(tree, rootfsDir)
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return Image{}, fmt.Errorf("stage image %s: %w", name, err)
	}
	made, err := fill(ctx, rootfs)
	if err != nil {
		return Image{}, fmt.Errorf("stage image %s: %w", name, err)
	}
	if err := addAgentMountPoint(rootfs); err != nil {
		return Image{}, fmt.Errorf("stage image %s: %w", name, err)
	}
	img := Image{Name: name, Shell: made.Shell, Format: Format, Config: made.Config}
	if err := writeMeta(tree, img); err != nil {
		return Image{}, fmt.Errorf("stage image %s: %w", name, err)
	}
	// On disk before it is renamed into place: a crash must not leave a
	// final tree with holes.
	unix.Sync()
	return img, nil
}

// CommitImport renames tree, staged by StageImport, into place as the
// imported image called name under imagesDir, unless that image is
// there already: then created is false and tree is left to the caller
// to remove (each image is stored once). Only the rename is done under
// the imports' lock.
func CommitImport(ctx context.Context, imagesDir, name, tree string, log *slog.Logger) (_ Image, created bool, _ error) {
	if err := checkName(name); err != nil {
		return Image{}, false, err
	}
	dir, err := formatRoot(imagesDir)
	if err != nil {
		return Image{}, false, fmt.Errorf("store image %s: %w", name, err)
	}
	unlock, err := lock(ctx, filepath.Join(dir, importLock))
	if err != nil {
		return Image{}, false, fmt.Errorf("store image %s: %w", name, err)
	}
	defer unlock()
	if img, err := Load(imagesDir, name); !errors.Is(err, ErrNotFound) {
		return img, false, err
	}
	// A final directory without its image.json (never written by us,
	// but possible by hand) is replaced.
	final := filepath.Join(dir, name)
	if _, err := os.Lstat(final); err == nil {
		log.Info("removing incomplete image", "dir", final)
		if err := removeTree(final); err != nil {
			return Image{}, false, fmt.Errorf("store image %s: %w", name, err)
		}
	}
	if err := os.Rename(tree, final); err != nil {
		return Image{}, false, fmt.Errorf("store image %s: %w", name, err)
	}
	img, err := Load(imagesDir, name)
	return img, err == nil, err
}

// Remove deletes the imported image called name under imagesDir, if it
// exists.
// The caller makes sure that no sandbox uses it.
func Remove(ctx context.Context, imagesDir, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	dir, err := formatRoot(imagesDir)
	if err != nil {
		return fmt.Errorf("remove image %s: %w", name, err)
	}
	unlock, err := lock(ctx, filepath.Join(dir, importLock))
	if err != nil {
		return fmt.Errorf("remove image %s: %w", name, err)
	}
	defer unlock()
	// Renamed away first, so that Load never finds half a tree.
	final := filepath.Join(dir, name)
	gone := filepath.Join(dir, "."+name+".tmp-removed")
	if err := os.Rename(final, gone); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove image %s: %w", name, err)
	}
	if err := removeTree(gone); err != nil {
		return fmt.Errorf("remove image %s: %w", name, err)
	}
	return nil
}

func makeImage(ctx context.Context, imagesDir, name, lockName, recipe string, log *slog.Logger,
	build func(ctx context.Context, rootfs string) (Image, error),
) (Image, bool, error) {
	if err := checkName(name); err != nil {
		return Image{}, false, err
	}
	// found is an image to use as it is: any complete one, or, with a
	// recipe, one of that recipe.
	found := func() (Image, bool, error) {
		img, err := Load(imagesDir, name)
		if errors.Is(err, ErrNotFound) || (err == nil && recipe != "" && img.Recipe != recipe) {
			return Image{}, false, nil
		}
		return img, true, err
	}
	if img, ok, err := found(); ok || err != nil {
		return img, false, err
	}
	dir, err := formatRoot(imagesDir)
	if err != nil {
		return Image{}, false, fmt.Errorf("build image %s: %w", name, err)
	}
	unlock, err := lock(ctx, filepath.Join(dir, lockName))
	if err != nil {
		return Image{}, false, fmt.Errorf("build image %s: %w", name, err)
	}
	defer unlock()
	// Someone else may have built it while we waited for the lock.
	if img, ok, err := found(); ok || err != nil {
		return img, false, err
	}

	final := filepath.Join(dir, name)
	// An image of another recipe is replaced once the new one is built.
	_, loadErr := Load(imagesDir, name)
	replace := loadErr == nil
	// Leftovers of interrupted builds, and a final directory without its
	// image.json (never written by us, but possible by hand).
	stale, _ := filepath.Glob(filepath.Join(dir, "."+name+".tmp-*"))
	if _, err := os.Lstat(final); err == nil && !replace {
		stale = append(stale, final)
	}
	for _, d := range stale {
		log.Info("removing incomplete image", "dir", d)
		if err := removeTree(d); err != nil {
			return Image{}, false, fmt.Errorf("build image %s: %w", name, err)
		}
	}

	tmp, err := os.MkdirTemp(dir, "."+name+".tmp-")
	if err != nil {
		return Image{}, false, fmt.Errorf("build image %s: %w", name, err)
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
		return Image{}, false, fmt.Errorf("build image %s: %w", name, err)
	}
	rootfs := filepath.Join(tmp, rootfsDir)
	var made Image
	if old, ok := loadLegacy(imagesDir, name); ok && recipe == "" {
		start := time.Now()
		if err := convert(ctx, old, rootfs); err != nil {
			return Image{}, false, fmt.Errorf("convert image %s of format 1: %w", name, err)
		}
		log.Info("converted image of format 1", "image", name, "from", old.Dir, "took", time.Since(start).Round(time.Millisecond))
		made.Shell = old.Shell
	} else {
		if build == nil {
			return Image{}, false, fmt.Errorf("load image %s from %s: %w", name, imagesDir, ErrNotFound)
		}
		if err := os.Mkdir(rootfs, 0o755); err != nil {
			return Image{}, false, fmt.Errorf("build image %s: %w", name, err)
		}
		if made, err = build(ctx, rootfs); err != nil {
			return Image{}, false, fmt.Errorf("build image %s: %w", name, err)
		}
	}
	if err := addAgentMountPoint(rootfs); err != nil {
		return Image{}, false, fmt.Errorf("build image %s: %w", name, err)
	}
	img := Image{Name: name, Shell: made.Shell, Format: Format, Config: made.Config, Recipe: recipe}
	if err := writeMeta(tmp, img); err != nil {
		return Image{}, false, fmt.Errorf("build image %s: %w", name, err)
	}
	unix.Sync()
	if replace {
		// Sandboxes running on the old tree keep it through their
		// mounts; it is set aside, not removed, for them.
		old, err := os.MkdirTemp(dir, "."+name+".old-")
		if err != nil {
			return Image{}, false, fmt.Errorf("build image %s: %w", name, err)
		}
		if err := os.Rename(final, filepath.Join(old, name)); err != nil {
			return Image{}, false, fmt.Errorf("build image %s: set the old one aside: %w", name, err)
		}
		log.Info("replaced an image of another recipe; the old tree is kept for sandboxes that run on it", "image", name, "old", old)
	}
	if err := os.Rename(tmp, final); err != nil {
		return Image{}, false, fmt.Errorf("build image %s: %w", name, err)
	}
	done = true
	img, err = Load(imagesDir, name)
	return img, err == nil, err
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
