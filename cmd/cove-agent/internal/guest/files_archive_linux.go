package guest

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// readArchive streams the folder as a tar.gz: directories, regular files
// and symlinks, names relative to the folder. Other kinds are left out.
// An error after the first byte cuts the answer short.
func (f *fileService) readArchive(w http.ResponseWriter, r *http.Request) error {
	p, err := queryPath(r, "path")
	if err != nil {
		return err
	}
	root, err := filepath.EvalSymlinks(p)
	if err != nil {
		return fsError(p, err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return fsError(p, err)
	}
	if !fi.IsDir() {
		return errorf(http.StatusConflict, wire.CodeConflict, "%s is not a directory; download a file with files/content", p)
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 256<<10)
	zw, _ := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	err = filepath.WalkDir(root, func(wp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if r.Context().Err() != nil {
			return r.Context().Err()
		}
		if wp == root {
			return nil
		}
		rel := strings.TrimPrefix(wp, strings.TrimSuffix(root, "/")+"/")
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(wp); err != nil {
				return err
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			return nil // devices, sockets, FIFOs
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.Format = tar.FormatPAX
		if !fi.Mode().IsRegular() {
			return tw.WriteHeader(hdr)
		}
		fd, err := os.OpenFile(wp, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		defer fd.Close()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		// Exactly the size of the header: bytes appended since are left out;
		// a file that shrank fails the archive.
		_, err = io.CopyBuffer(tw, io.NewSectionReader(fd, 0, hdr.Size), *bp)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		f.log.Warn("archive cut short", "path", p, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// writeArchive extracts a tar (gzipped or not) into a folder. Every entry
// is checked and written into a staging directory beside the folder first;
// only once the whole archive was read and found good is it moved into the
// folder, so a refused archive leaves nothing of itself.
func (f *fileService) writeArchive(w http.ResponseWriter, r *http.Request) error {
	p, err := queryPath(r, "path")
	if err != nil {
		return err
	}
	o, err := parseWriteOptions(r)
	if err != nil {
		return err
	}
	target, err := writable(p, true)
	if err != nil {
		return err
	}
	if target == "/" {
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "extracting into / is not allowed; name a folder")
	}
	exists := false
	if fi, err := os.Lstat(target); err == nil {
		if !fi.IsDir() {
			return errorf(http.StatusConflict, wire.CodeConflict, "%s exists and is not a directory", p)
		}
		exists = true
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fsError(p, err)
	}
	parent := filepath.Dir(target)
	if err := mkdirAll(p, parent, o.uid, o.gid); err != nil {
		return err
	}
	stage, err := os.MkdirTemp(parent, ".cove-extract-*")
	if err != nil {
		return fsError(p, err)
	}
	defer os.RemoveAll(stage)

	x := &extractor{p: p, target: target, stage: stage, uid: o.uid, gid: o.gid}
	if err := x.extract(r.Body); err != nil {
		return err
	}
	unlock := f.locks.Lock(target)
	defer unlock()
	if !exists {
		if err := os.Chmod(stage, 0o755); err != nil {
			return fsError(p, err)
		}
		if err := chown(stage, o.uid, o.gid); err != nil {
			return err
		}
		if err := os.Rename(stage, target); err != nil {
			return fsError(p, err)
		}
	} else {
		if err := x.conflicts(); err != nil {
			return err
		}
		if err := x.merge(); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, wire.ArchiveResult{Entries: x.entries, Bytes: x.bytes})
	return nil
}

type extractor struct {
	p      string // the folder as the caller named it
	target string // resolved
	stage  string
	uid    int
	gid    int

	entries int64
	bytes   int64
	dirs    []dirTime
}

type dirTime struct {
	path string
	t    time.Time
}

func (x *extractor) refuse(name, format string, args ...any) error {
	return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "archive entry %q %s; nothing was extracted", name, fmt.Sprintf(format, args...))
}

// entryName checks a name of the archive and returns it cleaned and
// relative, or "" for the folder itself.
func (x *extractor) entryName(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", x.refuse(name, "contains a NUL byte")
	}
	if strings.HasPrefix(name, "/") {
		return "", x.refuse(name, "is an absolute path, which would leave the folder")
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", x.refuse(name, "contains .., which would leave the folder")
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", nil
	}
	if protected(path.Join(x.target, clean)) {
		return "", protectedError(path.Join(x.p, clean), path.Join(x.target, clean))
	}
	return clean, nil
}

// parentsIn makes the parent directories of rel in the staging directory,
// refusing to go through anything that is not a directory (a symlink of
// the archive, say).
func (x *extractor) parentsIn(name, rel string) error {
	dir := x.stage
	parts := strings.Split(rel, "/")
	for _, c := range parts[:len(parts)-1] {
		dir = filepath.Join(dir, c)
		fi, err := os.Lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fsError(x.p, err)
			}
			if err := chown(dir, x.uid, x.gid); err != nil {
				return err
			}
		case err != nil:
			return fsError(x.p, err)
		case !fi.IsDir():
			return x.refuse(name, "goes through %s, which is not a directory", c)
		}
	}
	return nil
}

func (x *extractor) extract(body io.Reader) error {
	br := bufio.NewReaderSize(body, 64<<10)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "the archive is not valid gzip: %v; nothing was extracted", err)
		}
		defer zr.Close()
		in = zr
	}
	tr := tar.NewReader(in)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "the archive is not a valid tar (or gzipped tar): %v; nothing was extracted", err)
		}
		rel, err := x.entryName(hdr.Name)
		if err != nil {
			return err
		}
		if rel == "" {
			continue // the folder itself
		}
		if err := x.parentsIn(hdr.Name, rel); err != nil {
			return err
		}
		dst := filepath.Join(x.stage, rel)
		mode := fs.FileMode(hdr.Mode & 0o777)
		if hdr.Mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		// An entry may replace an earlier one of the same name (not a
		// directory with its contents).
		if fi, err := os.Lstat(dst); err == nil && !(fi.IsDir() && hdr.Typeflag == tar.TypeDir) {
			if fi.IsDir() {
				return x.refuse(hdr.Name, "replaces a directory of the same archive")
			}
			os.Remove(dst)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fsError(x.p, err)
			}
			if err := chown(dst, x.uid, x.gid); err != nil {
				return err
			}
			if err := os.Chmod(dst, mode|0o700); err != nil {
				return fsError(x.p, err)
			}
			x.dirs = append(x.dirs, dirTime{dst, hdr.ModTime})
		case tar.TypeReg, tar.TypeRegA:
			fd, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				return fsError(x.p, err)
			}
			n, err := io.CopyBuffer(fd, tr, *bp)
			x.bytes += n
			if err == nil {
				err = fd.Chmod(mode)
			}
			if err == nil && os.Geteuid() == 0 {
				err = fd.Chown(x.uid, x.gid)
			}
			if cerr := fd.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				var pe *fs.PathError
				if errors.As(err, &pe) {
					return fsError(x.p, err)
				}
				return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "the archive was cut short in %q (%v); nothing was extracted", hdr.Name, err)
			}
			if err := os.Chtimes(dst, hdr.ModTime, hdr.ModTime); err != nil {
				return fsError(x.p, err)
			}
		case tar.TypeSymlink:
			if err := x.checkLink(hdr.Name, rel, hdr.Linkname); err != nil {
				return err
			}
			if err := os.Symlink(hdr.Linkname, dst); err != nil {
				return fsError(x.p, err)
			}
			if err := chown(dst, x.uid, x.gid); err != nil {
				return err
			}
		case tar.TypeLink:
			lrel, err := x.entryName(hdr.Linkname)
			if err != nil || lrel == "" {
				return x.refuse(hdr.Name, "is a hard link to %q, outside the folder", hdr.Linkname)
			}
			src := filepath.Join(x.stage, lrel)
			if err := x.parentsIn(hdr.Name, lrel); err != nil {
				return err
			}
			fi, err := os.Lstat(src)
			if err != nil || !fi.Mode().IsRegular() {
				return x.refuse(hdr.Name, "is a hard link to %q, which is not a file earlier in the archive", hdr.Linkname)
			}
			if err := os.Link(src, dst); err != nil {
				return fsError(x.p, err)
			}
		case tar.TypeXGlobalHeader:
			continue
		default:
			continue // devices and FIFOs are not extracted
		}
		x.entries++
	}
	for i := len(x.dirs) - 1; i >= 0; i-- {
		os.Chtimes(x.dirs[i].path, x.dirs[i].t, x.dirs[i].t)
	}
	return nil
}

// checkLink refuses a symlink whose target is absolute or leads out of the
// folder from where the link is.
func (x *extractor) checkLink(name, rel, link string) error {
	switch {
	case link == "":
		return x.refuse(name, "is a symlink to nothing")
	case strings.IndexByte(link, 0) >= 0:
		return x.refuse(name, "is a symlink with a NUL byte")
	case strings.HasPrefix(link, "/"):
		return x.refuse(name, "is a symlink to the absolute path %q, outside the folder", link)
	}
	// ".." only leading, and never above the folder: then the link
	// resolves inside it, since the directories it climbs are real ones
	// (entries never go through symlinks) and the links it descends
	// through obey the same rule.
	depth := strings.Count(rel, "/")
	descended := false
	for _, c := range strings.Split(link, "/") {
		switch c {
		case "", ".":
		case "..":
			if descended {
				return x.refuse(name, "is a symlink to %q, with .. after a name; write it without", link)
			}
			if depth--; depth < 0 {
				return x.refuse(name, "is a symlink to %q, outside the folder", link)
			}
		default:
			descended = true
		}
	}
	return nil
}

// conflicts finds staged entries that cannot replace what the folder has:
// a directory over a file or the other way round. Nothing is moved yet.
func (x *extractor) conflicts() error {
	return filepath.WalkDir(x.stage, func(sp string, d fs.DirEntry, err error) error {
		if err != nil {
			return fsError(x.p, err)
		}
		if sp == x.stage {
			return nil
		}
		rel := strings.TrimPrefix(sp, x.stage+"/")
		fi, err := os.Lstat(filepath.Join(x.target, rel))
		if errors.Is(err, fs.ErrNotExist) {
			if d.IsDir() {
				return filepath.SkipDir // moved whole
			}
			return nil
		}
		if err != nil {
			return fsError(path.Join(x.p, rel), err)
		}
		switch {
		case d.IsDir() && !fi.IsDir():
			return errorf(http.StatusConflict, wire.CodeConflict, "%s exists and is not a directory, but the archive has a directory there; nothing was extracted", path.Join(x.p, rel))
		case !d.IsDir() && fi.IsDir():
			return errorf(http.StatusConflict, wire.CodeConflict, "%s is a directory, but the archive has a file there; nothing was extracted", path.Join(x.p, rel))
		}
		return nil
	})
}

// merge moves the staged entries into the folder: new directories whole,
// files over files.
func (x *extractor) merge() error {
	return filepath.WalkDir(x.stage, func(sp string, d fs.DirEntry, err error) error {
		if err != nil {
			return fsError(x.p, err)
		}
		if sp == x.stage {
			return nil
		}
		rel := strings.TrimPrefix(sp, x.stage+"/")
		dst := filepath.Join(x.target, rel)
		if d.IsDir() {
			if fi, err := os.Lstat(dst); err == nil && fi.IsDir() {
				return nil // descend
			}
			if err := os.Rename(sp, dst); err != nil {
				return fsError(path.Join(x.p, rel), err)
			}
			return filepath.SkipDir
		}
		if err := os.Rename(sp, dst); err != nil {
			return fsError(path.Join(x.p, rel), err)
		}
		return nil
	})
}
