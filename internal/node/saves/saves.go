// Package saves keeps the files of sleeping sandboxes: each save is one
// compressed archive of the sandbox's disk image with a manifest naming its
// size and checksum. Dir keeps them in a directory; an S3-compatible bucket
// can implement Store the same way.
//
// The archive stores only the data extents of the sparse disk image (found
// with SEEK_DATA and SEEK_HOLE), gzip-compressed: a 4 GiB disk holding
// 100 MiB saves about 100 MiB before compression. The manifest is written
// last, so a save without one is incomplete and is never restored.
package saves

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
)

// Store keeps saves by sandbox ID.
type Store interface {
	// Save archives the disk image at path as the save of id, replacing an
	// older one only once the new one is complete.
	Save(ctx context.Context, id, path string) (Manifest, error)
	// Restore writes the save of id as a sparse disk image at path.
	Restore(ctx context.Context, id, path string) (Manifest, error)
	// Stat returns the manifest of a complete save, or not_found.
	Stat(ctx context.Context, id string) (Manifest, error)
	// Delete removes the save of id; a missing save is no error.
	Delete(ctx context.Context, id string) error
}

// Manifest describes a complete save.
type Manifest struct {
	SandboxID    string    `json:"sandbox_id"`
	Format       string    `json:"format"`
	DiskBytes    int64     `json:"disk_bytes"`    // the image's apparent size
	DataBytes    int64     `json:"data_bytes"`    // bytes in its data extents
	ArchiveBytes int64     `json:"archive_bytes"` // the compressed archive
	SHA256       string    `json:"sha256"`        // of the archive file
	CreatedAt    time.Time `json:"created_at"`
}

const (
	format      = "cove-sparse-gzip-1"
	archiveName = "disk.gz"
	manifest    = "manifest.json"
	endMarker   = ^uint64(0)
	chunk       = 1 << 20
)

// Dir keeps saves under a directory, one subdirectory per sandbox.
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

// Save archives the disk image at path.
func (d *Dir) Save(ctx context.Context, id, path string) (Manifest, error) {
	src, err := os.Open(path)
	if err != nil {
		return Manifest{}, fmt.Errorf("save %s: %w", id, err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return Manifest{}, err
	}
	// A new save is built beside the old one and swapped in whole.
	tmp, err := os.MkdirTemp(d.root, id+".saving-")
	if err != nil {
		return Manifest{}, fmt.Errorf("save %s: %w", id, err)
	}
	defer os.RemoveAll(tmp)
	f, err := os.OpenFile(filepath.Join(tmp, archiveName), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return Manifest{}, err
	}
	defer f.Close()
	sum := sha256.New()
	counted := &countWriter{w: io.MultiWriter(f, sum)}
	bw := bufio.NewWriterSize(counted, 1<<20)
	zw, err := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err != nil {
		return Manifest{}, err
	}
	data, err := writeExtents(ctx, zw, src, st.Size())
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("save %s: %w", id, err)
	}
	m := Manifest{
		SandboxID: id, Format: format, DiskBytes: st.Size(), DataBytes: data,
		ArchiveBytes: counted.n, SHA256: hex.EncodeToString(sum.Sum(nil)), CreatedAt: time.Now().UTC(),
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, manifest), b, 0o600); err != nil {
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

// writeExtents writes the data extents of src: a header of the disk size,
// then (offset, length, bytes) for each extent, then an end marker.
func writeExtents(ctx context.Context, w io.Writer, src *os.File, size int64) (int64, error) {
	var hdr [16]byte
	if _, err := io.WriteString(w, format+"\n"); err != nil {
		return 0, err
	}
	binary.BigEndian.PutUint64(hdr[:8], uint64(size))
	if _, err := w.Write(hdr[:8]); err != nil {
		return 0, err
	}
	fd := int(src.Fd())
	buf := make([]byte, chunk)
	var total int64
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole remains
		}
		if err != nil {
			return total, fmt.Errorf("find data: %w", err)
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return total, fmt.Errorf("find hole: %w", err)
		}
		for pos := start; pos < end; {
			n := min(int64(len(buf)), end-pos)
			if _, err := src.ReadAt(buf[:n], pos); err != nil {
				return total, fmt.Errorf("read disk: %w", err)
			}
			binary.BigEndian.PutUint64(hdr[:8], uint64(pos))
			binary.BigEndian.PutUint64(hdr[8:], uint64(n))
			if _, err := w.Write(hdr[:]); err != nil {
				return total, err
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return total, err
			}
			pos += n
			total += n
		}
		off = end
	}
	binary.BigEndian.PutUint64(hdr[:8], endMarker)
	binary.BigEndian.PutUint64(hdr[8:], 0)
	_, err := w.Write(hdr[:])
	return total, err
}

// Stat returns the manifest of a complete save.
func (d *Dir) Stat(ctx context.Context, id string) (Manifest, error) {
	b, err := os.ReadFile(filepath.Join(d.dir(id), manifest))
	if errors.Is(err, os.ErrNotExist) {
		return Manifest{}, api.Errorf(api.CodeNotFound, "no complete save of sandbox %s", id)
	}
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil || m.Format != format || m.SandboxID != id {
		return Manifest{}, fmt.Errorf("save of %s: manifest is unreadable", id)
	}
	return m, nil
}

// Restore writes the save as a sparse disk image at path, checking the
// archive's checksum; on any failure path is removed.
func (d *Dir) Restore(ctx context.Context, id, path string) (_ Manifest, err error) {
	m, err := d.Stat(ctx, id)
	if err != nil {
		return m, err
	}
	src, err := os.Open(filepath.Join(d.dir(id), archiveName))
	if err != nil {
		return m, fmt.Errorf("restore %s: %w", id, err)
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return m, fmt.Errorf("restore %s: %w", id, err)
	}
	defer func() {
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	sum := sha256.New()
	zr, err := gzip.NewReader(bufio.NewReaderSize(io.TeeReader(src, sum), 1<<20))
	if err != nil {
		return m, fmt.Errorf("restore %s: %w", id, err)
	}
	if err := readExtents(ctx, zr, dst, m.DiskBytes); err != nil {
		return m, fmt.Errorf("restore %s: %w", id, err)
	}
	// Read to the end so the checksum covers the whole archive.
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return m, fmt.Errorf("restore %s: %w", id, err)
	}
	if _, err := io.Copy(sum, src); err != nil {
		return m, err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != m.SHA256 {
		return m, fmt.Errorf("restore %s: archive checksum %s, manifest says %s", id, got, m.SHA256)
	}
	return m, dst.Sync()
}

func readExtents(ctx context.Context, r io.Reader, dst *os.File, size int64) error {
	magic := make([]byte, len(format)+1)
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != format+"\n" {
		return fmt.Errorf("not a %s archive", format)
	}
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:8]); err != nil {
		return err
	}
	if got := int64(binary.BigEndian.Uint64(hdr[:8])); got != size {
		return fmt.Errorf("archive disk size %d, manifest says %d", got, size)
	}
	if err := dst.Truncate(size); err != nil {
		return err
	}
	buf := make([]byte, chunk)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return fmt.Errorf("truncated archive: %w", err)
		}
		off, n := binary.BigEndian.Uint64(hdr[:8]), binary.BigEndian.Uint64(hdr[8:])
		if off == endMarker {
			return nil
		}
		if n > chunk || off+n > uint64(size) {
			return fmt.Errorf("corrupt extent %d+%d", off, n)
		}
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return fmt.Errorf("truncated archive: %w", err)
		}
		if _, err := dst.WriteAt(buf[:n], int64(off)); err != nil {
			return err
		}
	}
}

// Delete removes the save of id.
func (d *Dir) Delete(ctx context.Context, id string) error {
	if err := os.RemoveAll(d.dir(id)); err != nil {
		return fmt.Errorf("delete save of %s: %w", id, err)
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
