package archive

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

// ExtractInto extracts a tar.gz into dir. A new dir is made beside it
// first and renamed into place only when the whole archive was good, so a
// broken download leaves nothing; an existing dir is merged into.
func ExtractInto(r io.Reader, dir string) error {
	if _, err := os.Lstat(dir); err == nil {
		return Extract(r, dir)
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".part-*")
	if err != nil {
		return err
	}
	if err := Extract(r, tmp); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("%w; nothing was kept", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return nil
}

// Extract extracts a tar.gz into dir (made if missing), refusing entries
// that would leave it (absolute names, .., symlinks pointing out, paths
// through symlinks). Directories, regular files and symlinks are made;
// other entries (devices, FIFOs, hard links) are skipped. It reads the
// gzip stream to its end, so a damaged archive is an error even when its
// tar part ended well. What was extracted before an error stays.
func Extract(r io.Reader, dir string) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(zr)
	buf := make([]byte, 256<<10)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			// Read to the end of the gzip data: its checksum is checked there.
			if _, err := io.Copy(io.Discard, zr); err != nil {
				return fmt.Errorf("archive cut short or invalid: %w", err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("archive cut short or invalid: %w", err)
		}
		name := path.Clean(hdr.Name)
		if !fs.ValidPath(name) {
			return fmt.Errorf("archive entry %q would leave %s", hdr.Name, dir)
		}
		if name == "." {
			continue
		}
		mode := fs.FileMode(hdr.Mode & 0o777)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
			root.Chmod(name, mode|0o700)
		case tar.TypeReg, tar.TypeRegA:
			if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, err = io.CopyBuffer(f, tr, buf)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			root.Chmod(name, mode)
		case tar.TypeSymlink:
			target := path.Join(path.Dir(name), hdr.Linkname)
			if path.IsAbs(hdr.Linkname) || !fs.ValidPath(target) {
				return fmt.Errorf("archive entry %q is a symlink leaving %s", hdr.Name, dir)
			}
			if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
				return err
			}
			root.Remove(name)
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		}
	}
}
