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
// with the modes, owners and times the archive records. Names that
// would leave root are refused.
func extractTar(ctx context.Context, path, root string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	type dirTime struct {
		path string
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
		if name == "." {
			if err := os.Chmod(root, h.FileInfo().Mode()&fs.ModePerm); err != nil {
				return err
			}
			continue
		}
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return fmt.Errorf("%s: entry %q leaves its directory", path, h.Name)
		}
		dst := filepath.Join(root, name)
		mode := h.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(dst, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
			dirs = append(dirs, dirTime{dst, h.ModTime})
		case tar.TypeReg:
			out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
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
			if err := os.Symlink(h.Linkname, dst); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry %q has a type restore does not make", path, h.Name)
		}
		if err := os.Lchown(dst, h.Uid, h.Gid); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeSymlink {
			// After chown, which clears set-id bits.
			if err := os.Chmod(dst, mode); err != nil {
				return err
			}
			if err := os.Chtimes(dst, h.ModTime, h.ModTime); err != nil {
				return err
			}
		}
	}
	// Directories' times last: entries written into them changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Chtimes(dirs[i].path, dirs[i].t, dirs[i].t)
	}
	return nil
}
