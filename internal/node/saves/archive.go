package saves

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// newCompressor compresses what is written to it into w: zstd at its
// fastest level with a goroutine per CPU (random data, which compresses
// not at all, passes at memory speed; gzip's single thread was most of a
// save's CPU).
func newCompressor(w io.Writer) (io.WriteCloser, error) {
	return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithWindowSize(1<<20))
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// newDecompressor reads r, zstd or gzip as its first bytes say: saves
// written before zstd are gzip.
func newDecompressor(r *bufio.Reader) (io.ReadCloser, error) {
	head, _ := r.Peek(4)
	switch {
	case bytes.HasPrefix(head, zstdMagic):
		// The window is bounded, as a save from a store is read: a save's
		// encoder uses a few MiB, a hostile one may ask for more.
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithDecoderMaxWindow(64<<20))
		if err != nil {
			return nil, err
		}
		return zr.IOReadCloser(), nil
	case bytes.HasPrefix(head, gzipMagic):
		return gzip.NewReader(r)
	}
	return nil, fmt.Errorf("archive is neither zstd nor gzip")
}

// summed counts and hashes what is written through it; Close ends its
// hashing.
type summed struct {
	w   io.Writer
	sum *hasher
	n   int64
}

func newSummed(w io.Writer) *summed { return &summed{w: w, sum: newHasher()} }

func (s *summed) Close() { s.sum.Close() }

func (s *summed) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.sum.Write(p[:n])
	s.n += int64(n)
	return n, err
}

func (s *summed) hex() string { return hex.EncodeToString(s.sum.Sum()) }

// writeDisk writes the disk image at path to w as a zstd-compressed
// archive of its data extents, filling in the disk fields of m.
func writeDisk(ctx context.Context, w io.Writer, path string, m *Manifest) error {
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	counted := newSummed(w)
	defer counted.Close()
	bw := bufio.NewWriterSize(counted, 1<<20)
	zw, err := newCompressor(bw)
	if err != nil {
		return err
	}
	data, err := writeExtents(ctx, zw, src, st.Size())
	// Closed once, on failure too: it ends the encoder's goroutines.
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return err
	}
	m.DiskBytes, m.DataBytes, m.ArchiveBytes, m.SHA256 = st.Size(), data, counted.n, counted.hex()
	return nil
}

// writeExtents writes the data extents of src: a header of the disk size,
// then (offset, length, bytes) for each extent, then an end marker.
func writeExtents(ctx context.Context, w io.Writer, src *os.File, size int64) (int64, error) {
	var hdr [16]byte
	if _, err := io.WriteString(w, extentsHeader+"\n"); err != nil {
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

// restoreDisk writes the archive r holds as a sparse disk image at path
// (which must not exist), checking it against m; on any failure path is
// removed.
func restoreDisk(ctx context.Context, r io.Reader, path string, m Manifest) (err error) {
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	sum := newHasher()
	defer sum.Close()
	tee := io.TeeReader(r, sum)
	zr, err := newDecompressor(bufio.NewReaderSize(tee, 1<<20))
	if err != nil {
		return err
	}
	defer zr.Close()
	if err := readExtents(ctx, zr, dst, m.DiskBytes); err != nil {
		return err
	}
	// Read to the end so the checksum covers the whole archive.
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return err
	}
	if got := hex.EncodeToString(sum.Sum()); got != m.SHA256 {
		return fmt.Errorf("archive checksum %s, manifest says %s", got, m.SHA256)
	}
	return dst.Sync()
}

func readExtents(ctx context.Context, r io.Reader, dst *os.File, size int64) error {
	magic := make([]byte, len(extentsHeader)+1)
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != extentsHeader+"\n" {
		return fmt.Errorf("not a %s archive", extentsHeader)
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
	wb := writeback{f: dst}
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
		wb.written(int64(off), int64(n))
	}
}

// OutputMarker is the file in a sandbox's output directory that names
// the save generation the directory was saved as or restored from; an
// output archive leaves it out.
const OutputMarker = ".save-generation"

// writeOutput writes the directory dir (regular files and directories)
// to w as a zstd-compressed tar, filling in the output fields of m. A
// missing directory is an empty one.
func writeOutput(ctx context.Context, w io.Writer, dir string, m *Manifest) error {
	counted := newSummed(w)
	defer counted.Close()
	zw, err := newCompressor(counted)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path == dir {
			return fs.SkipAll
		}
		if err != nil {
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." || rel == OutputMarker {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o700})
		case d.Type().IsRegular():
			return addFile(tw, path, rel)
		}
		return nil // neither file nor directory: not output
	})
	if err == nil {
		err = tw.Close()
	}
	// Closed once, on failure too: it ends the encoder's goroutines.
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("archive output: %w", err)
	}
	m.OutputBytes, m.OutputSHA256 = counted.n, counted.hex()
	return nil
}

func addFile(tw *tar.Writer, path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: st.Size(), ModTime: st.ModTime()}); err != nil {
		return err
	}
	// Exactly the size in the header, even if the file grew since.
	_, err = io.CopyN(tw, f, st.Size())
	return err
}

// restoreOutput extracts the output archive r holds as the directory dir,
// which must not exist, checking it against m. It is built beside dir and
// renamed into place, so dir is whole or missing.
func restoreOutput(ctx context.Context, r io.Reader, dir string, m Manifest) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".restoring-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	sum := newHasher()
	defer sum.Close()
	tee := io.TeeReader(r, sum)
	zr, err := newDecompressor(bufio.NewReader(tee))
	if err != nil {
		return fmt.Errorf("output archive: %w", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("output archive: %w", err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		// A save is written by nodes; a hostile one must not place files
		// outside the directory.
		if !filepath.IsLocal(name) || name == OutputMarker {
			return fmt.Errorf("output archive: entry %q is outside its directory", h.Name)
		}
		path := filepath.Join(tmp, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return err
			}
			if err := extractFile(tr, path, h); err != nil {
				return err
			}
		default:
			return fmt.Errorf("output archive: entry %q is neither file nor directory", h.Name)
		}
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return err
	}
	if got := hex.EncodeToString(sum.Sum()); got != m.OutputSHA256 {
		return fmt.Errorf("output archive checksum %s, manifest says %s", got, m.OutputSHA256)
	}
	if err := os.WriteFile(filepath.Join(tmp, OutputMarker), []byte(m.Generation), 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o700); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

func extractFile(r io.Reader, path string, h *tar.Header) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, h.Size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chtimes(path, h.ModTime, h.ModTime)
}
