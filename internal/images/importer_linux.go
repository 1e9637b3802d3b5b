package images

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/image"
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
}

// NewImporter returns an importer into imagesDir, which it prepares.
func NewImporter(imagesDir string, p Policy, maxArchiveBytes int64, log *slog.Logger) (*Importer, error) {
	if err := image.PrepareImports(imagesDir); err != nil {
		return nil, fmt.Errorf("prepare imports in %s: %w", imagesDir, err)
	}
	if p.MaxID == 0 {
		p.MaxID = 65536
	}
	return &Importer{imagesDir: imagesDir, policy: p, maxArchive: maxArchiveBytes, log: log}, nil
}

// Import reads an image archive from r, verifies and unpacks it, and
// stores it unless the same image (the same manifest digest) is stored
// already; created reports whether it was new. The archive is kept only
// while it is read.
func (im *Importer) Import(ctx context.Context, r io.Reader) (_ image.Image, created bool, _ error) {
	work, err := os.MkdirTemp(filepath.Join(im.imagesDir, "v2"), ".upload-")
	if err != nil {
		return image.Image{}, false, fmt.Errorf("import image: %w", err)
	}
	defer os.RemoveAll(work)
	file := filepath.Join(work, "archive.tar")
	if f, ok := r.(*os.File); ok {
		// A file the caller received whole (the control plane's upload
		// spool): read in place rather than copied.
		if file, err = im.inPlace(f); err != nil {
			return image.Image{}, false, err
		}
	} else if err := im.receive(r, file); err != nil {
		return image.Image{}, false, err
	}
	scratch := filepath.Join(work, "layout")
	if err := os.Mkdir(scratch, 0o700); err != nil {
		return image.Image{}, false, err
	}
	a, err := Open(file, scratch)
	if err != nil {
		return image.Image{}, false, err
	}
	img, created, err := image.Import(ctx, im.imagesDir, image.DirName(a.Digest.String()), im.log,
		func(ctx context.Context, rootfs string) (image.Image, error) {
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
		return image.Image{}, false, err
	}
	if !img.Imported() {
		return image.Image{}, false, fmt.Errorf("import image: %s holds an image cove built", img.Dir)
	}
	im.log.Info("image imported", "digest", img.Config.Digest, "format", a.Format, "new", created, "bytes", img.Config.SizeBytes)
	return img, created, nil
}

// ImportImage is Import in the control plane's terms (server.ImageImporter).
func (im *Importer) ImportImage(ctx context.Context, r io.Reader) (api.Image, bool, error) {
	img, created, err := im.Import(ctx, r)
	if err != nil {
		return api.Image{}, false, err
	}
	c := img.Config
	return api.Image{Digest: c.Digest, SizeBytes: c.SizeBytes, Config: api.ImageConfig{
		Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd, Labels: c.Labels,
		UID: c.UID, GID: c.GID, Home: c.Home, Shell: nonNil(img.Shell),
	}}, created, nil
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
