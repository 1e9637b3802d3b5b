package backup

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// writeTar archives the tree at root (only the subtrees named in only,
// when only is not nil) into a new 0600 file at path. Directories,
// regular files and symbolic links are kept with their modes and
// owners; a tree that does not exist gives an empty archive. A file
// that vanishes while it is read (a save replaced meanwhile) is left
// out.
func writeTar(ctx context.Context, path, root string, only []string) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	tops := only
	if tops == nil {
		tops = []string{"."}
	}
	for _, top := range tops {
		start := filepath.Join(root, top)
		if _, err := os.Lstat(start); errors.Is(err, os.ErrNotExist) {
			continue
		}
		err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			return addEntry(tw, p, rel)
		})
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Sync()
}

func addEntry(tw *tar.Writer, p, rel string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var link string
	switch {
	case fi.Mode().IsRegular(), fi.IsDir():
	case fi.Mode()&fs.ModeSymlink != 0:
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	case fi.Mode()&(fs.ModeSocket|fs.ModeNamedPipe) != 0:
		return nil // made by a running program, not data
	default:
		return fmt.Errorf("%s: %s files are not backed up", p, fi.Mode().Type())
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	h.Name = filepath.ToSlash(rel)
	if fi.IsDir() {
		h.Name += "/"
	}
	h.Uname, h.Gname = "", ""
	h.Format = tar.FormatPAX
	if !fi.Mode().IsRegular() {
		return tw.WriteHeader(h)
	}
	src, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer src.Close()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	// The header promised h.Size bytes: a file that shrank meanwhile is
	// padded so the archive stays readable, and restore's save checks
	// catch a save that changed under it.
	n, err := io.Copy(tw, io.LimitReader(src, h.Size))
	if err != nil {
		return err
	}
	if n < h.Size {
		_, err = io.CopyN(tw, zeros{}, h.Size-n)
	}
	return err
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// extractTar unpacks the archive at path under root, which exists,
// with the modes, owners and times the archive records. Every entry is
// made through an os.Root, so no name and no symbolic link met on the
// way (one the archive made itself included) can write outside root:
// such an entry fails the restore.
func extractTar(ctx context.Context, path, root string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	tr := tar.NewReader(f)
	type dirTime struct {
		name string
		t    time.Time
	}
	var dirs []dirTime
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return fmt.Errorf("%s: entry %q leaves its directory", path, h.Name)
		}
		mode := h.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		if err := extractEntry(r, tr, h, name, mode); err != nil {
			return fmt.Errorf("%s: entry %q: %w", path, h.Name, err)
		}
		if h.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirTime{name, h.ModTime})
		}
	}
	// Directories' times last: entries written into them changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		r.Chtimes(dirs[i].name, dirs[i].t, dirs[i].t)
	}
	return nil
}

// extractEntry makes one entry of an archive under r.
func extractEntry(r *os.Root, tr io.Reader, h *tar.Header, name string, mode fs.FileMode) error {
	if name == "." {
		return r.Chmod(".", mode&fs.ModePerm)
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := r.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case tar.TypeReg:
		out, err := r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := r.Symlink(h.Linkname, name); err != nil {
			return err
		}
	default:
		return errors.New("a type restore does not make")
	}
	if err := r.Lchown(name, h.Uid, h.Gid); err != nil {
		return err
	}
	if h.Typeflag == tar.TypeSymlink {
		return nil
	}
	// After chown, which clears set-id bits.
	if err := r.Chmod(name, mode); err != nil {
		return err
	}
	return r.Chtimes(name, h.ModTime, h.ModTime)
}
