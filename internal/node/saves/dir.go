package saves

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cove-dev/cove/api"
)

// Dir keeps saves under a directory on the node, one subdirectory per
// sandbox holding its newest save only: a new generation replaces the
// older one once it is complete. Blobs live under ".images".
type Dir struct {
	root string
}

var _ Store = (*Dir)(nil)

// NewDir returns a save store in root, creating it.
func NewDir(root string) (*Dir, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("save store %s: %w", root, err)
	}
	return &Dir{root: root}, nil
}

func (d *Dir) dir(id string) string { return filepath.Join(d.root, id) }

// Close implements Store; a directory holds nothing open.
func (d *Dir) Close() error { return nil }

// Save archives files as the save of id, replacing the older one.
func (d *Dir) Save(ctx context.Context, id, gen string, files Files) (Manifest, error) {
	if err := checkID(id); err != nil {
		return Manifest{}, err
	}
	if err := checkGen(gen); err != nil {
		return Manifest{}, err
	}
	// A new save is built beside the old one and swapped in whole.
	tmp, err := os.MkdirTemp(d.root, id+".saving-")
	if err != nil {
		return Manifest{}, fmt.Errorf("save %s: %w", id, err)
	}
	defer os.RemoveAll(tmp)
	m := Manifest{SandboxID: id, Generation: gen, Format: format}
	err = writeFile(filepath.Join(tmp, archiveName), func(w io.Writer) error {
		return writeDisk(ctx, w, files.Disk, &m)
	})
	if err == nil && files.Output != "" {
		err = writeFile(filepath.Join(tmp, outputName), func(w io.Writer) error {
			return writeOutput(ctx, w, files.Output, &m)
		})
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("save %s: %w", id, err)
	}
	m.CreatedAt = time.Now().UTC()
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFile(filepath.Join(tmp, manifest), func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}); err != nil {
		return Manifest{}, err
	}
	old := d.dir(id) + ".old"
	os.RemoveAll(old)
	if err := os.Rename(d.dir(id), old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return Manifest{}, fmt.Errorf("save %s: %w", id, err)
	}
	if err := os.Rename(tmp, d.dir(id)); err != nil {
		os.Rename(old, d.dir(id))
		return Manifest{}, fmt.Errorf("save %s: %w", id, err)
	}
	os.RemoveAll(old)
	return m, nil
}

// writeFile creates path with what fn writes, synced.
func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := fn(newAppender(f)); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// Stat returns the manifest of the save of id; a generation other than
// the one kept is not_found.
func (d *Dir) Stat(ctx context.Context, id, gen string) (Manifest, error) {
	if err := checkID(id); err != nil {
		return Manifest{}, err
	}
	b, err := os.ReadFile(filepath.Join(d.dir(id), manifest))
	if errors.Is(err, os.ErrNotExist) {
		return Manifest{}, api.Errorf(api.CodeNotFound, "no complete save of sandbox %s", id)
	}
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("save of %s: manifest is unreadable", id)
	}
	// A save from before generations has none: it is the only one.
	if gen != "" && m.Generation != "" && m.Generation != gen {
		return Manifest{}, api.Errorf(api.CodeNotFound, "no save of sandbox %s of generation %s (this store keeps %s)", id, gen, m.Generation)
	}
	if err := checkManifest(m, id, ""); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Restore writes the save into files, checking the archives' checksums;
// on any failure nothing is left at files' paths.
func (d *Dir) Restore(ctx context.Context, id, gen string, files Files) (Manifest, error) {
	m, err := d.Stat(ctx, id, gen)
	if err != nil {
		return m, err
	}
	err = restoreFrom(ctx, m, files, func(name string) (io.ReadCloser, error) {
		return os.Open(filepath.Join(d.dir(id), name))
	})
	if err != nil {
		return m, fmt.Errorf("restore %s: %w", id, err)
	}
	return m, nil
}

// restoreFrom restores the disk and the output of the save m describes
// from the objects open returns, leaving nothing behind on failure.
func restoreFrom(ctx context.Context, m Manifest, files Files, open func(name string) (io.ReadCloser, error)) error {
	r, err := open(archiveName)
	if err != nil {
		return err
	}
	err = restoreDisk(ctx, r, files.Disk, m)
	r.Close()
	if err != nil || files.Output == "" || !m.HasOutput() {
		return err
	}
	if r, err = open(outputName); err == nil {
		err = restoreOutput(ctx, r, files.Output, m)
		r.Close()
	}
	if err != nil {
		os.Remove(files.Disk)
	}
	return err
}

// Delete removes the save of id.
func (d *Dir) Delete(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := os.RemoveAll(d.dir(id)); err != nil {
		return fmt.Errorf("delete save of %s: %w", id, err)
	}
	return nil
}

// Prune implements Store: a directory keeps one generation only, so
// there is nothing older to remove.
func (d *Dir) Prune(ctx context.Context, id, keep string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return checkGen(keep)
}

func (d *Dir) blobPath(digest string) (string, error) {
	name, err := blobName(digest)
	if err != nil {
		return "", err
	}
	return filepath.Join(d.root, ".images", name), nil
}

// PutBlob stores r as the blob of digest once its bytes match it.
func (d *Dir) PutBlob(ctx context.Context, digest string, r io.Reader) error {
	path, err := d.blobPath(digest)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".put-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, sum), ctxReader{ctx, r}); err != nil {
		return err
	}
	if err := matchDigest(digest, sum.Sum(nil)); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// GetBlob opens the blob of digest.
func (d *Dir) GetBlob(ctx context.Context, digest string) (io.ReadCloser, error) {
	path, err := d.blobPath(digest)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, api.Errorf(api.CodeNotFound, "no blob %s", digest)
	}
	if err != nil {
		return nil, err
	}
	return newVerifying(f, digest), nil
}

// blobName is a blob's file name: "sha256-<hex>.tar".
func blobName(digest string) (string, error) {
	if _, err := digestBytes(digest); err != nil {
		return "", err
	}
	return "sha256-" + digest[len("sha256:"):] + ".tar", nil
}

func digestBytes(digest string) ([]byte, error) {
	const p = "sha256:"
	if len(digest) != len(p)+64 || digest[:len(p)] != p {
		return nil, api.Errorf(api.CodeInvalidArgument, "blob digest %q is not sha256:<64 hex>", digest)
	}
	b, err := hex.DecodeString(digest[len(p):])
	if err != nil || hex.EncodeToString(b) != digest[len(p):] {
		return nil, api.Errorf(api.CodeInvalidArgument, "blob digest %q is not sha256:<64 lowercase hex>", digest)
	}
	return b, nil
}

func matchDigest(digest string, sum []byte) error {
	want, err := digestBytes(digest)
	if err != nil {
		return err
	}
	if string(want) != string(sum) {
		return api.Errorf(api.CodeInvalidArgument, "blob's bytes have digest sha256:%x, not %s", sum, digest)
	}
	return nil
}

// verifying reads a blob and fails at its end when the bytes do not have
// the digest.
type verifying struct {
	rc     io.ReadCloser
	digest string
	sum    interface {
		io.Writer
		Sum([]byte) []byte
	}
}

func newVerifying(rc io.ReadCloser, digest string) *verifying {
	return &verifying{rc: rc, digest: digest, sum: sha256.New()}
}

func (v *verifying) Read(p []byte) (int, error) {
	n, err := v.rc.Read(p)
	v.sum.Write(p[:n])
	if errors.Is(err, io.EOF) {
		if merr := matchDigest(v.digest, v.sum.Sum(nil)); merr != nil {
			return n, fmt.Errorf("blob %s is corrupt: %w", v.digest, merr)
		}
	}
	return n, err
}

func (v *verifying) Close() error { return v.rc.Close() }

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
