package images

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/keylock"
	"github.com/cove-dev/cove/internal/node/image"

	"golang.org/x/sys/unix"
)

// Importer stores imported images under an images dir, each once, named
// by its manifest digest (image.DirName), unshifted: sandboxes see an
// image through an idmapped mount in their own ID range, as they see the
// images cove builds.
type Importer struct {
	imagesDir string
	policy    Policy
	// maxArchive bounds an uploaded archive's bytes; 0 sets no bound.
	maxArchive int64
	log        *slog.Logger
	// blobs, when set, receive every staged image and give those Fetch
	// brings (SetBlobs).
	blobs Blobs
	// fetching holds one lock per digest while Fetch brings it, so that
	// fetches of one image in this process download it once.
	fetching keylock.Map

	mu     sync.Mutex
	staged map[string]*staged // by handle (its directory), until committed or discarded
}

// NewImporter returns an importer into imagesDir, which it prepares.
func NewImporter(imagesDir string, p Policy, maxArchiveBytes int64, log *slog.Logger) (*Importer, error) {
	if err := image.PrepareImports(imagesDir); err != nil {
		return nil, fmt.Errorf("prepare imports in %s: %w", imagesDir, err)
	}
	if p.MaxID == 0 {
		p.MaxID = 65536
	}
	im := &Importer{imagesDir: imagesDir, policy: p, maxArchive: maxArchiveBytes, log: log, staged: map[string]*staged{}}
	im.sweep()
	return im, nil
}

// stagingPrefix names the private directories of imports in progress
// under <imagesDir>/v2: each holds the archive while it is read and the
// image's tree until it is renamed into place.
const stagingPrefix = ".upload-"

// staged is an import unpacked in its own directory, locked (flock) by
// this process while it lives so that a sweep spares it.
type staged struct {
	dir  string
	held *os.File
	img  image.Image
}

// Import reads an image archive from r, verifies and unpacks it, and
// stores it unless the same image (the same manifest digest) is stored
// already; created reports whether it was new. The archive is kept only
// while it is read.
func (im *Importer) Import(ctx context.Context, r io.Reader) (_ image.Image, created bool, _ error) {
	st, err := im.stage(ctx, r, true)
	if err != nil {
		return image.Image{}, false, err
	}
	return im.commit(ctx, st)
}

// stage verifies and unpacks the archive in r into a staging directory
// of its own, taking no lock that another import, a delete or a sandbox
// waits for; publish puts it into the blobs too (SetBlobs). On failure
// nothing is left.
func (im *Importer) stage(ctx context.Context, r io.Reader, publish bool) (_ *staged, err error) {
	work, err := os.MkdirTemp(filepath.Join(im.imagesDir, "v2"), stagingPrefix)
	if err != nil {
		return nil, fmt.Errorf("import image: %w", err)
	}
	st := &staged{dir: work}
	defer func() {
		if err != nil {
			im.discard(st)
		}
	}()
	if st.held, err = holdDir(work); err != nil {
		return nil, fmt.Errorf("import image: %w", err)
	}
	file := filepath.Join(work, "archive.tar")
	if f, ok := r.(*os.File); ok {
		// A file the caller received whole (the control plane's upload
		// spool): read in place rather than copied.
		if file, err = im.inPlace(f); err != nil {
			return nil, err
		}
	} else if err := im.receive(r, file); err != nil {
		return nil, err
	}
	scratch := filepath.Join(work, "layout")
	if err := os.Mkdir(scratch, 0o700); err != nil {
		return nil, err
	}
	a, err := Open(file, scratch)
	if err != nil {
		return nil, err
	}
	name := image.DirName(a.Digest.String())
	tree := filepath.Join(work, "tree")
	if err := os.Mkdir(tree, 0o700); err != nil {
		return nil, err
	}
	im.log.Info("unpacking image", "digest", a.Digest.String(), "staging", work)
	st.img, err = image.StageImport(ctx, tree, name, func(ctx context.Context, rootfs string) (image.Image, error) {
		size, err := Unpack(ctx, a, rootfs, im.policy)
		if err != nil {
			return image.Image{}, err
		}
		root, err := os.OpenRoot(rootfs)
		if err != nil {
			return image.Image{}, err
		}
		defer root.Close()
		cfg, shell, err := configOf(a, root, im.policy.MaxID)
		if err != nil {
			return image.Image{}, err
		}
		cfg.SizeBytes = size
		return image.Image{Shell: shell, Config: cfg}, nil
	})
	if err != nil {
		return nil, err
	}
	if publish {
		if err := im.publish(ctx, a); err != nil {
			return nil, err
		}
	}
	// The archive and its scratch layout are not needed any more.
	for _, p := range []string{filepath.Join(work, "archive.tar"), scratch} {
		if err := os.RemoveAll(p); err != nil {
			return nil, err
		}
	}
	im.log.Info("image unpacked", "digest", a.Digest.String(), "format", a.Format, "bytes", st.img.Config.SizeBytes)
	return st, nil
}

// commit moves a staged image into place (under the imports' lock, for
// a rename) unless its digest is stored already, and removes what is
// left of the staging directory either way.
func (im *Importer) commit(ctx context.Context, st *staged) (image.Image, bool, error) {
	defer im.discard(st)
	img, created, err := image.CommitImport(ctx, im.imagesDir, st.img.Name, filepath.Join(st.dir, "tree"), im.log)
	if err != nil {
		return image.Image{}, false, err
	}
	if !img.Imported() {
		return image.Image{}, false, fmt.Errorf("import image: %s holds an image cove built", img.Dir)
	}
	im.log.Info("image stored", "digest", img.Config.Digest, "new", created, "bytes", img.Config.SizeBytes)
	return img, created, nil
}

// discard removes a staging directory and lets go of it.
func (im *Importer) discard(st *staged) {
	if err := os.RemoveAll(st.dir); err != nil {
		im.log.Warn("remove an image's staging directory", "dir", st.dir, "err", err)
	}
	if st.held != nil {
		st.held.Close()
	}
}

// holdDir opens dir and takes an exclusive flock on it, kept until the
// file is closed: sweep passes over directories held so.
func holdDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}

// sweep removes the staging directories of imports that no process
// holds (left by a crash); another server sharing the images dir keeps
// its own.
func (im *Importer) sweep() {
	dirs, _ := filepath.Glob(filepath.Join(im.imagesDir, "v2", stagingPrefix+"*"))
	for _, d := range dirs {
		f, err := holdDir(d)
		if err != nil {
			continue
		}
		im.log.Info("removing an interrupted import", "dir", d)
		if err := os.RemoveAll(d); err != nil {
			im.log.Warn("remove an interrupted import", "dir", d, "err", err)
		}
		f.Close()
	}
}

// StageImage is stage in the control plane's terms
// (imagecatalog.Importer): it returns the image and a handle for
// CommitImage or DiscardImage.
func (im *Importer) StageImage(ctx context.Context, r io.Reader) (api.Image, string, error) {
	st, err := im.stage(ctx, r, true)
	if err != nil {
		return api.Image{}, "", err
	}
	im.mu.Lock()
	im.staged[st.dir] = st
	im.mu.Unlock()
	c, shell := st.img.Config, st.img.Shell
	return api.Image{Digest: c.Digest, SizeBytes: c.SizeBytes, Config: api.ImageConfig{
		Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd, Labels: c.Labels,
		UID: c.UID, GID: c.GID, Home: c.Home, Shell: nonNil(shell),
	}}, st.dir, nil
}

// CommitImage stores the staged image of handle (created: its tree is
// new); the handle is spent either way.
func (im *Importer) CommitImage(ctx context.Context, handle string) (created bool, err error) {
	st, ok := im.take(handle)
	if !ok {
		return false, fmt.Errorf("commit image: no staged import %s", handle)
	}
	_, created, err = im.commit(ctx, st)
	return created, err
}

// DiscardImage drops the staged image of handle.
func (im *Importer) DiscardImage(handle string) {
	if st, ok := im.take(handle); ok {
		im.discard(st)
	}
}

func (im *Importer) take(handle string) (*staged, bool) {
	im.mu.Lock()
	defer im.mu.Unlock()
	st, ok := im.staged[handle]
	delete(im.staged, handle)
	return st, ok
}

// RemoveImage is Remove for the control plane.
func (im *Importer) RemoveImage(ctx context.Context, digest string) error {
	return im.Remove(ctx, digest)
}

// Load returns the stored image of digest ("sha256:…").
func (im *Importer) Load(digest string) (image.Image, error) {
	return image.Load(im.imagesDir, image.DirName(digest))
}

// Remove deletes the stored image of digest; the caller makes sure no
// sandbox and no other name uses it.
func (im *Importer) Remove(ctx context.Context, digest string) error {
	return image.Remove(ctx, im.imagesDir, image.DirName(digest))
}

// MaxArchiveBytes is the largest archive the importer takes (0: any).
func (im *Importer) MaxArchiveBytes() int64 { return im.maxArchive }

// inPlace checks a received archive's size and returns its path.
func (im *Importer) inPlace(f *os.File) (string, error) {
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("stat the image archive: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("the image archive %s is not a regular file", f.Name())
	}
	if im.maxArchive > 0 && st.Size() > im.maxArchive {
		return "", api.Errorf(api.CodePayloadTooLarge, "the image archive is larger than %d bytes, this server's limit", im.maxArchive)
	}
	return f.Name(), nil
}

// receive writes the upload to file, bounded.
func (im *Importer) receive(r io.Reader, file string) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	src := r
	if im.maxArchive > 0 {
		src = io.LimitReader(r, im.maxArchive+1)
	}
	n, err := io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("receive the image archive: %w", err)
	}
	if im.maxArchive > 0 && n > im.maxArchive {
		return api.Errorf(api.CodePayloadTooLarge, "the image archive is larger than %d bytes, this server's limit", im.maxArchive)
	}
	return nil
}
