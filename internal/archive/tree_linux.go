package archive

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// ErrTreeTooLarge is returned when a tree holds more than the bytes given.
var ErrTreeTooLarge = errors.New("tree too large")

// A tree made on the node by another uid (a clone) is read by root
// through descriptors only: each directory is opened relative to its
// parent's descriptor with O_NOFOLLOW, each entry is looked at with
// fstatat(AT_SYMLINK_NOFOLLOW), a symlink is read with readlinkat and
// sent as a link, and a regular file is opened with O_NOFOLLOW and checked
// by fstat to be the file that was looked at. So no name in the tree,
// whatever it is or becomes, makes root read anything outside it.

// TreeSize is the bytes of the regular files under root (their sizes as
// they would be copied, holes included), read by descriptor as WriteTree
// reads them; it stops with ErrTreeTooLarge past limit.
func TreeSize(root string, limit int64) (int64, error) {
	var total int64
	err := walkTree(root, func(rel string, dirfd int, name string, st *unix.Stat_t) error {
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			total += st.Size
			if total > limit {
				return ErrTreeTooLarge
			}
		}
		return nil
	})
	return total, err
}

// WriteTree writes the tree at root as a tar.gz, as WriteDir does
// (regular files with their permission bits, directories, symlinks; names
// relative to root; no owners; other types skipped), but by descriptor,
// for a tree another uid wrote (a git clone on the node). It fails with
// ErrTreeTooLarge once its regular files hold more than limit bytes.
func WriteTree(w io.Writer, root string, limit int64) error {
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	buf := make([]byte, 256<<10)
	var total int64
	err := walkTree(root, func(rel string, dirfd int, name string, st *unix.Stat_t) error {
		hdr := &tar.Header{Name: rel, Mode: int64(st.Mode & 0o777), ModTime: time.Unix(st.Mtim.Unix())}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
			return tw.WriteHeader(hdr)
		case unix.S_IFLNK:
			target, err := readlinkat(dirfd, name)
			if err != nil {
				return fmt.Errorf("read link %s: %w", rel, err)
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case unix.S_IFREG:
		default:
			return nil
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", rel, err)
		}
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		var fst unix.Stat_t
		if err := unix.Fstat(fd, &fst); err != nil {
			return fmt.Errorf("stat %s: %w", rel, err)
		}
		if fst.Mode&unix.S_IFMT != unix.S_IFREG || fst.Ino != st.Ino || fst.Dev != st.Dev {
			return fmt.Errorf("%s changed while it was read", rel)
		}
		total += fst.Size
		if total > limit {
			return ErrTreeTooLarge
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, fst.Size
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.CopyBuffer(tw, io.LimitReader(f, fst.Size), buf)
		if err == nil && n != fst.Size {
			err = fmt.Errorf("%s changed size while it was read", rel)
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// maxTreeDepth bounds the directories open at once in walkTree.
const maxTreeDepth = 256

// walkTree calls fn for every entry under root (not root itself), parents
// before children, names sorted: rel is its slash-separated path from
// root, dirfd the open directory that holds it as name, st its lstat.
func walkTree(root string, fn func(rel string, dirfd int, name string, st *unix.Stat_t) error) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", root, err)
	}
	return walkDir(fd, "", 0, fn)
}

// walkDir walks the directory dirfd (which it closes), named rel.
func walkDir(dirfd int, rel string, depth int, fn func(rel string, dirfd int, name string, st *unix.Stat_t) error) error {
	d := os.NewFile(uintptr(dirfd), rel)
	defer d.Close()
	if depth > maxTreeDepth {
		return fmt.Errorf("%s: directories nested more than %d deep", rel, maxTreeDepth)
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("read directory %q: %w", rel, err)
	}
	slices.Sort(names)
	for _, name := range names {
		child := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %s: %w", child, err)
		}
		if err := fn(child, dirfd, name, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", child, err)
		}
		if err := walkDir(cfd, child, depth+1, fn); err != nil {
			return err
		}
	}
	return nil
}

// readlinkat reads the symlink name in dirfd.
func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
