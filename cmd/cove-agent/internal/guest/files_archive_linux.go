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
	return inCall(func(c *fsCall) error {
		l, err := c.resolve(p, true)
		if err != nil {
			return err
		}
		defer l.close()
		root, err := l.openDir(p, "download a file with files/content")
		if err != nil {
			return err
		}
		defer root.Close()
		w.Header().Set("Content-Type", "application/gzip")
		w.WriteHeader(http.StatusOK)
		bw := bufio.NewWriterSize(w, 256<<10)
		zw, _ := gzip.NewWriterLevel(bw, gzip.BestSpeed)
		tw := tar.NewWriter(zw)
		bp := bufPool.Get().(*[]byte)
		defer bufPool.Put(bp)
		err = walkIn(root, "", false, func(rel string, dir *os.File, name string, fi *statInfo) error {
			if r.Context().Err() != nil {
				return r.Context().Err()
			}
			link := ""
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				if link, err = readLinkAt(dir, name); err != nil {
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
			fd, err := openIn(dir, name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
			if err != nil {
				if errors.Is(err, unix.ENOENT) {
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
	})
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
	return inCall(func(c *fsCall) error {
		l, err := c.writable(p, true)
		if err != nil {
			return err
		}
		defer l.close()
		if l.isRoot() {
			return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "extracting into / is not allowed; name a folder")
		}
		exists := false
		if l.exists {
			fi, err := statAt(l.dir, l.name())
			if err != nil && !errors.Is(err, unix.ENOENT) {
				return fsError(p, err)
			}
			if err == nil && !fi.IsDir() {
				return errorf(http.StatusConflict, wire.CodeConflict, "%s exists and is not a directory", p)
			}
			exists = err == nil
		}
		parent, err := makeParents(p, l, o.uid, o.gid)
		if err != nil {
			return err
		}
		defer parent.Close()
		stageName := ""
		for range 100 {
			stageName = tempName(".cove-extract-")
			err = unix.Mkdirat(int(parent.Fd()), stageName, 0o700)
			if !errors.Is(err, unix.EEXIST) {
				break
			}
		}
		if err != nil {
			return fsError(p, err)
		}
		defer removeAllIn(parent, stageName)
		stage, err := openName(parent, stageName)
		if err != nil {
			return fsError(p, err)
		}
		defer stage.Close()

		x := &extractor{p: p, target: l.path(), stage: stage, uid: o.uid, gid: o.gid}
		defer x.closeDirs()
		if err := x.extract(r.Body); err != nil {
			return err
		}
		unlock := f.locks.Lock(x.target)
		defer unlock()
		if !exists {
			if err := unix.Fchmodat(int(parent.Fd()), stageName, 0o755, 0); err != nil {
				return fsError(p, err)
			}
			if err := chownFD(p, stage, o.uid, o.gid); err != nil {
				return err
			}
			if err := unix.Renameat(int(parent.Fd()), stageName, int(parent.Fd()), l.name()); err != nil {
				return fsError(p, err)
			}
		} else {
			target, err := openName(parent, l.name())
			if err != nil {
				return fsError(p, err)
			}
			defer target.Close()
			if err := x.conflicts(parent, stageName, target, ""); err != nil {
				return err
			}
			if err := x.merge(parent, stageName, target, ""); err != nil {
				return err
			}
		}
		writeJSON(w, http.StatusOK, wire.ArchiveResult{Entries: x.entries, Bytes: x.bytes})
		return nil
	})
}

// extractor writes the entries of an archive into a staging directory,
// through descriptors: nothing in the staging directory is followed.
type extractor struct {
	p      string   // the folder as the caller named it
	target string   // resolved
	stage  *os.File // the staging directory (O_PATH)
	uid    int
	gid    int

	entries int64
	bytes   int64
	dirs    []dirTime
	// lastDir is the directory of the last entry (entries usually come
	// by directory), open as lastFD.
	lastDir string
	lastFD  *os.File
}

type dirTime struct {
	rel string
	t   time.Time
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

// closeDirs closes the directory the extractor kept open.
func (x *extractor) closeDirs() {
	if x.lastFD != nil {
		x.lastFD.Close()
		x.lastFD, x.lastDir = nil, ""
	}
}

// parentIn opens the directory of rel in the staging directory, making the
// missing ones (owned by uid:gid) and refusing to go through anything that
// is not a directory (a symlink of the archive, say). The caller closes it.
func (x *extractor) parentIn(name, rel string) (*os.File, string, error) {
	dirRel, base := path.Split(rel)
	dirRel = strings.TrimSuffix(dirRel, "/")
	if dirRel != "" && (x.lastFD == nil || x.lastDir != dirRel) {
		x.closeDirs()
		d := x.stage
		for _, c := range strings.Split(dirRel, "/") {
			nd, err := openName(d, c)
			if errors.Is(err, unix.ENOENT) {
				if err = unix.Mkdirat(int(d.Fd()), c, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
					if nd, err = openName(d, c); err == nil {
						if err = chownFD(x.p, nd, x.uid, x.gid); err != nil {
							nd.Close()
						}
					}
				}
			}
			if d != x.stage {
				d.Close()
			}
			if err != nil {
				return nil, "", fsError(x.p, err)
			}
			if fi, err := statAt(nd, ""); err != nil || !fi.IsDir() {
				nd.Close()
				return nil, "", x.refuse(name, "goes through %s, which is not a directory", c)
			}
			d = nd
		}
		x.lastDir, x.lastFD = dirRel, d
	}
	dir := x.stage
	if dirRel != "" {
		dir = x.lastFD
	}
	d, err := dupFile(dir)
	if err != nil {
		return nil, "", fsError(x.p, err)
	}
	return d, base, nil
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
		dir, base, err := x.parentIn(hdr.Name, rel)
		if err != nil {
			return err
		}
		done, err := x.entry(tr, hdr, rel, dir, base, *bp)
		dir.Close()
		if err != nil {
			return err
		}
		if done {
			x.entries++
		}
	}
	// Read the stream to its very end (tar padding, gzip's checksum): an
	// upload whose sender fails it at the end (a digest that does not
	// match, a size past a limit) must not be taken as whole.
	if _, err := io.CopyBuffer(io.Discard, in, *bp); err != nil {
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "the archive was cut short after its last entry (%v); nothing was extracted", err)
	}
	if in != io.Reader(br) {
		if _, err := io.CopyBuffer(io.Discard, br, *bp); err != nil {
			return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "the archive was cut short after its gzip data (%v); nothing was extracted", err)
		}
	}
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d, err := openat2(x.stage, x.dirs[i].rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW,
			unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
		if err == nil {
			futimens(d, x.dirs[i].t)
			d.Close()
		}
	}
	return nil
}

// entry writes one entry of the archive as base in dir; done says it
// counts (devices, FIFOs and global headers do not).
func (x *extractor) entry(tr *tar.Reader, hdr *tar.Header, rel string, dir *os.File, base string, buf []byte) (done bool, err error) {
	dfd := int(dir.Fd())
	mode := fs.FileMode(hdr.Mode & 0o777)
	if hdr.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	// An entry may replace an earlier one of the same name (not a
	// directory with its contents).
	if fi, err := statAt(dir, base); err == nil && !(fi.IsDir() && hdr.Typeflag == tar.TypeDir) {
		if fi.IsDir() {
			return false, x.refuse(hdr.Name, "replaces a directory of the same archive")
		}
		unix.Unlinkat(dfd, base, 0)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		d, err := mkdirIn(x.p, dir, base, 0o755, x.uid, x.gid)
		if err != nil {
			return false, err
		}
		d.Close()
		if err := unix.Fchmodat(dfd, base, uint32(mode.Perm()|0o700)|uint32(hdr.Mode&0o1000), 0); err != nil {
			return false, fsError(x.p, err)
		}
		x.dirs = append(x.dirs, dirTime{rel, hdr.ModTime})
	case tar.TypeReg, tar.TypeRegA:
		fd, err := openIn(dir, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err != nil {
			return false, fsError(x.p, err)
		}
		n, err := io.CopyBuffer(fd, tr, buf)
		x.bytes += n
		if err == nil {
			err = fd.Chmod(mode)
		}
		if err == nil && os.Geteuid() == 0 {
			err = fd.Chown(x.uid, x.gid)
		}
		if err == nil {
			if terr := futimens(fd, hdr.ModTime); terr != nil {
				err = &fs.PathError{Op: "utimensat", Path: base, Err: terr}
			}
		}
		if cerr := fd.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				return false, fsError(x.p, err)
			}
			return false, errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "the archive was cut short in %q (%v); nothing was extracted", hdr.Name, err)
		}
	case tar.TypeSymlink:
		if err := x.checkLink(hdr.Name, rel, hdr.Linkname); err != nil {
			return false, err
		}
		if err := unix.Symlinkat(hdr.Linkname, dfd, base); err != nil {
			return false, fsError(x.p, err)
		}
		if os.Geteuid() == 0 {
			if err := unix.Fchownat(dfd, base, x.uid, x.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return false, fsError(x.p, err)
			}
		}
	case tar.TypeLink:
		lrel, err := x.entryName(hdr.Linkname)
		if err != nil || lrel == "" {
			return false, x.refuse(hdr.Name, "is a hard link to %q, outside the folder", hdr.Linkname)
		}
		sdir, sbase, err := x.parentIn(hdr.Name, lrel)
		if err != nil {
			return false, err
		}
		defer sdir.Close()
		fi, err := statAt(sdir, sbase)
		if err != nil || !fi.Mode().IsRegular() {
			return false, x.refuse(hdr.Name, "is a hard link to %q, which is not a file earlier in the archive", hdr.Linkname)
		}
		if err := unix.Linkat(int(sdir.Fd()), sbase, dfd, base, 0); err != nil {
			return false, fsError(x.p, err)
		}
	default:
		return false, nil // global headers; devices and FIFOs are not extracted
	}
	return true, nil
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

// conflicts finds staged entries (in sname of sparent) that cannot replace
// what the folder (tdir) has: a directory over a file or the other way
// round. Nothing is moved yet.
func (x *extractor) conflicts(sparent *os.File, sname string, tdir *os.File, rel string) error {
	sdir, err := openDirIn(sparent, sname)
	if err != nil {
		return fsError(x.p, err)
	}
	defer sdir.Close()
	names, err := readNames(sdir)
	if err != nil {
		return fsError(x.p, err)
	}
	for _, name := range names {
		crel := path.Join(rel, name)
		sfi, err := statAt(sdir, name)
		if err != nil {
			return fsError(x.p, err)
		}
		tfi, err := statAt(tdir, name)
		if errors.Is(err, unix.ENOENT) {
			continue // moved whole
		}
		if err != nil {
			return fsError(path.Join(x.p, crel), err)
		}
		switch {
		case sfi.IsDir() && !tfi.IsDir():
			return errorf(http.StatusConflict, wire.CodeConflict, "%s exists and is not a directory, but the archive has a directory there; nothing was extracted", path.Join(x.p, crel))
		case !sfi.IsDir() && tfi.IsDir():
			return errorf(http.StatusConflict, wire.CodeConflict, "%s is a directory, but the archive has a file there; nothing was extracted", path.Join(x.p, crel))
		case sfi.IsDir():
			t, err := openName(tdir, name)
			if err != nil {
				return fsError(path.Join(x.p, crel), err)
			}
			err = x.conflicts(sdir, name, t, crel)
			t.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// merge moves the staged entries into the folder: new directories whole,
// files over files. Nothing in the folder is followed: a symlink where the
// archive has a directory fails the rename.
func (x *extractor) merge(sparent *os.File, sname string, tdir *os.File, rel string) error {
	sdir, err := openDirIn(sparent, sname)
	if err != nil {
		return fsError(x.p, err)
	}
	defer sdir.Close()
	names, err := readNames(sdir)
	if err != nil {
		return fsError(x.p, err)
	}
	for _, name := range names {
		crel := path.Join(rel, name)
		sfi, err := statAt(sdir, name)
		if err != nil {
			return fsError(x.p, err)
		}
		if sfi.IsDir() {
			if tfi, err := statAt(tdir, name); err == nil && tfi.IsDir() {
				t, err := openName(tdir, name)
				if err != nil {
					return fsError(path.Join(x.p, crel), err)
				}
				err = x.merge(sdir, name, t, crel)
				t.Close()
				if err != nil {
					return err
				}
				continue
			}
		}
		if err := unix.Renameat(int(sdir.Fd()), name, int(tdir.Fd()), name); err != nil {
			return fsError(path.Join(x.p, crel), err)
		}
	}
	return nil
}
