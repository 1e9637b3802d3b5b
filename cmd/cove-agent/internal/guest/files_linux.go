package guest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/fspath"
	"github.com/cove-dev/cove/internal/keylock"
)

// fileService answers the file calls (see wire/files.go). It runs in the
// sandbox, so every path resolves in the sandbox's root, and each call
// resolves its paths itself (see files_at_linux.go): nobody in the sandbox
// can lead it elsewhere with a symlink.
type fileService struct {
	log *slog.Logger

	locks   keylock.Map // serializes writes to the same resolved path
	digests digestCache
}

// protectedDirs are never written by file calls: the kernel's views and
// the agent's own mount.
var protectedDirs = []string{"/proc", "/sys", "/dev", "/.cove"}

// copyBuffer is the size of the buffers that move file bytes.
const copyBuffer = 1 << 20

var bufPool = sync.Pool{New: func() any { b := make([]byte, copyBuffer); return &b }}

func (s *Server) fileRoutes(route func(string, handlerFunc)) {
	f := &fileService{log: s.log}
	route("GET /v1/files/stat", f.stat)
	route("GET /v1/files/list", f.list)
	route("GET /v1/files/content", f.read)
	route("PUT /v1/files/content", f.write)
	route("POST /v1/files/edit", f.edit)
	route("POST /v1/files/mkdir", f.mkdir)
	route("POST /v1/files/move", f.move)
	route("DELETE /v1/files", f.remove)
	route("GET /v1/files/archive", f.readArchive)
	route("PUT /v1/files/archive", f.writeArchive)
	route("GET /v1/files/watch", f.watch)
}

// queryPath reads and cleans the path parameter name.
func queryPath(r *http.Request, name string) (string, error) {
	return checkPath(r.URL.Query().Get(name))
}

func checkPath(p string) (string, error) {
	c, err := fspath.Clean(p)
	if err != nil {
		return "", errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "%v", err)
	}
	return c, nil
}

// protected reports whether the resolved path p is in a protected dir.
func protected(p string) bool {
	for _, d := range protectedDirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

func protectedError(p, resolved string) error {
	where := resolved
	if p != resolved {
		where = fmt.Sprintf("%s (%s)", p, resolved)
	}
	return errorf(http.StatusForbidden, wire.CodePermissionDenied,
		"%s is in /proc, /sys, /dev or /.cove, which file calls never write; use a command if you must", where)
}

// writable resolves p for a write (see fsCall.resolve) and refuses
// protected places.
func (c *fsCall) writable(p string, follow bool) (*location, error) {
	l, err := c.resolve(p, follow)
	if err != nil {
		return nil, err
	}
	if r := l.path(); protected(r) {
		l.close()
		return nil, protectedError(p, r)
	}
	return l, nil
}

// fsError turns a file system error into an Error a user can act on.
func fsError(p string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("%s: %w", p, err)
	}
	switch errno {
	case unix.ENOENT:
		return errorf(http.StatusNotFound, wire.CodeNotFound, "%s does not exist", p)
	case unix.EEXIST:
		return errorf(http.StatusConflict, wire.CodeConflict, "%s already exists", p)
	case unix.ENOTDIR:
		return errorf(http.StatusConflict, wire.CodeConflict, "a parent of %s is not a directory", p)
	case unix.EISDIR:
		return errorf(http.StatusConflict, wire.CodeConflict, "%s is a directory", p)
	case unix.ENOTEMPTY:
		return errorf(http.StatusConflict, wire.CodeConflict, "directory %s is not empty; pass recursive=true to remove it with its contents", p)
	case unix.EXDEV:
		return errorf(http.StatusConflict, wire.CodeConflict, "%s cannot be moved there: it is another file system (or a directory of the image, which cannot be renamed); copy it instead", p)
	case unix.EACCES, unix.EPERM:
		e := errorf(http.StatusForbidden, wire.CodePermissionDenied, "%s: %v", p, errno)
		e.denied = true
		return e
	case unix.EROFS, unix.ETXTBSY, unix.EBUSY:
		return errorf(http.StatusForbidden, wire.CodePermissionDenied, "%s cannot be written: %v (a read-only or protected place)", p, errno)
	case unix.ENOSPC, unix.EDQUOT:
		return errorf(http.StatusInsufficientStorage, wire.CodeInsufficientStorage, "the sandbox's disk is full writing %s; free space or create the sandbox with a larger disk_mib", p)
	case unix.ENAMETOOLONG:
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "%s: a name is too long", p)
	case unix.ELOOP:
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "%s: too many levels of symlinks", p)
	case unix.EINVAL:
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "%s: invalid argument (moving a directory into itself?)", p)
	}
	return fmt.Errorf("%s: %w", p, err)
}

// versionOf derives a file's version from what changes with its content:
// inode, size, modification and change times. Writes through the agent set
// the modification time from the fine clock, so two of them never share
// one; ctime covers in-place writes that restore the mtime.
func versionOf(st *syscall.Stat_t) string {
	var b [48]byte
	binary.LittleEndian.PutUint64(b[0:], st.Dev)
	binary.LittleEndian.PutUint64(b[8:], st.Ino)
	binary.LittleEndian.PutUint64(b[16:], uint64(st.Size))
	binary.LittleEndian.PutUint64(b[24:], uint64(st.Mtim.Nano()))
	binary.LittleEndian.PutUint64(b[32:], uint64(st.Ctim.Nano()))
	binary.LittleEndian.PutUint64(b[40:], uint64(st.Mode))
	sum := sha256.Sum256(b[:])
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

func statOf(fi fs.FileInfo) *syscall.Stat_t {
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil {
		st = &syscall.Stat_t{}
	}
	return st
}

// infoOf describes the file at p (as named by the caller) from its lstat;
// target is a symlink's.
func infoOf(p string, fi fs.FileInfo, target string) wire.FileInfo {
	st := statOf(fi)
	info := wire.FileInfo{
		Name: path.Base(p), Path: p, Size: fi.Size(),
		Mode:    uint32(fi.Mode().Perm()) | uint32(st.Mode&(unix.S_ISUID|unix.S_ISGID|unix.S_ISVTX)),
		MTimeNS: fi.ModTime().UnixNano(), Version: versionOf(st),
		UID: int(st.Uid), GID: int(st.Gid),
	}
	switch m := fi.Mode(); {
	case m.IsRegular():
		info.Type = wire.FileTypeFile
	case m.IsDir():
		info.Type = wire.FileTypeDir
	case m&fs.ModeSymlink != 0:
		info.Type = wire.FileTypeSymlink
		if len(target) <= fspath.MaxPath {
			info.Target = target
		}
	default:
		info.Type = wire.FileTypeOther
	}
	return info
}

// entry describes the location (its final name, not followed) as p.
func (l *location) entry(p string) (wire.FileInfo, error) {
	switch {
	case l.isRoot():
		return entryAt(p, l.dir, "")
	case !l.exists:
		return wire.FileInfo{}, fsError(p, unix.ENOENT)
	}
	return entryAt(p, l.dir, l.name())
}

func (f *fileService) stat(w http.ResponseWriter, r *http.Request) error {
	p, err := queryPath(r, "path")
	if err != nil {
		return err
	}
	return inCall(func(c *fsCall) error {
		l, err := c.resolve(p, false)
		if err != nil {
			return err
		}
		defer l.close()
		info, err := l.entry(p)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
}

// compareWalk orders paths as a pre-order walk with sorted names visits
// them: by components, a parent before its children.
func compareWalk(a, b string) int {
	return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/"))
}

// openDir opens the directory at the location for reading its entries;
// notDir completes the error for anything else.
func (l *location) openDir(p, notDir string) (*os.File, error) {
	if l.isRoot() {
		d, err := openDirIn(l.dir, ".")
		if err != nil {
			return nil, fsError(p, err)
		}
		return d, nil
	}
	if !l.exists || l.dangling {
		return nil, fsError(p, unix.ENOENT)
	}
	fi, err := statAt(l.dir, l.name())
	if err != nil {
		return nil, fsError(p, err)
	}
	if !fi.IsDir() {
		return nil, errorf(http.StatusConflict, wire.CodeConflict, "%s is not a directory; %s", p, notDir)
	}
	d, err := openDirIn(l.dir, l.name())
	if err != nil {
		return nil, fsError(p, err)
	}
	return d, nil
}

// errSkipDir tells walkIn not to enter a directory.
var errSkipDir = errors.New("skip this directory")

// walkIn calls fn for every entry below the directory d, in the order of
// filepath.WalkDir (sorted names, a directory before what is in it), with
// its path relative to d and the directory that holds it. fn returns
// errSkipDir not to enter a directory. Directories are entered through
// descriptors, never following a symlink; one that cannot be read is
// skipped with skipUnreadable, else its error ends the walk.
func walkIn(d *os.File, rel string, skipUnreadable bool, fn func(rel string, dir *os.File, name string, fi *statInfo) error) error {
	names, err := readNames(d)
	if err != nil {
		return err
	}
	for _, name := range names {
		crel := name
		if rel != "" {
			crel = rel + "/" + name
		}
		fi, err := statAt(d, name)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // gone since the directory was read
			}
			return err
		}
		if err := fn(crel, d, name, fi); err != nil {
			if err == errSkipDir {
				continue
			}
			return err
		}
		if !fi.IsDir() {
			continue
		}
		sub, err := openDirIn(d, name)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			continue // replaced since it was looked at
		}
		if err == nil {
			err = walkIn(sub, crel, skipUnreadable, fn)
			sub.Close()
		}
		var errno syscall.Errno
		if err != nil && skipUnreadable && errors.As(err, &errno) && (errno == unix.EACCES || errno == unix.EPERM) {
			continue // unreadable directory: listed, not entered
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (f *fileService) list(w http.ResponseWriter, r *http.Request) error {
	root, err := queryPath(r, "path")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	depth, err := intParam(q.Get("depth"), 1, 1, fspath.MaxListDepth, "depth")
	if err != nil {
		return err
	}
	limit, err := intParam(q.Get("limit"), fspath.MaxListLimit, 1, fspath.MaxListLimit, "limit")
	if err != nil {
		return err
	}
	after := q.Get("after")
	if after != "" {
		if after, err = checkPath(after); err != nil {
			return err
		}
	}
	return inCall(func(c *fsCall) error {
		// A symlink to a directory as root lists the directory, with paths
		// under the name asked for.
		l, err := c.resolve(root, true)
		if err != nil {
			return err
		}
		defer l.close()
		d, err := l.openDir(root, "stat it instead")
		if err != nil {
			return err
		}
		defer d.Close()
		out := wire.FileList{Items: []wire.FileInfo{}}
		size := 0
		stop := errors.New("page full")
		err = walkIn(d, "", true, func(rel string, dir *os.File, name string, fi *statInfo) error {
			p := path.Join(root, rel)
			isDir := fi.IsDir()
			if after != "" && compareWalk(p, after) <= 0 {
				// Skip what earlier pages had, descending only towards after.
				if isDir && p != after && !strings.HasPrefix(after, p+"/") {
					return errSkipDir
				}
				return nil
			}
			if len(out.Items) >= limit || size >= wire.MaxListBytes {
				out.Next = out.Items[len(out.Items)-1].Path
				return stop
			}
			target := ""
			if fi.Mode()&fs.ModeSymlink != 0 {
				target, _ = readLinkAt(dir, name)
			}
			info := withXattrs(infoOf(p, fi, target), dir, name, fi)
			out.Items = append(out.Items, info)
			size += len(info.Path) + len(info.Target) + 200
			for k, v := range info.Xattrs {
				size += len(k) + len(v) + 8
			}
			if isDir && strings.Count(rel, "/")+1 >= depth {
				return errSkipDir
			}
			return nil
		})
		if err != nil && err != stop {
			return fsError(root, err)
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

func intParam(v string, def, lo, hi int, name string) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "%s must be a whole number from %d to %d", name, lo, hi)
	}
	return n, nil
}

// openRegular opens the file at the location for reading and checks that
// it is a regular file.
func (l *location) openRegular(p string) (*os.File, fs.FileInfo, error) {
	isDir := errorf(http.StatusConflict, wire.CodeConflict, "%s is a directory; list it, or download it as an archive", p)
	switch {
	case l.isRoot():
		return nil, nil, isDir
	case !l.exists || l.dangling:
		return nil, nil, fsError(p, unix.ENOENT)
	}
	fd, err := openIn(l.dir, l.name(), unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fsError(p, err)
	}
	fi, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, nil, fsError(p, err)
	}
	if fi.IsDir() {
		fd.Close()
		return nil, nil, isDir
	}
	if !fi.Mode().IsRegular() {
		fd.Close()
		return nil, nil, errorf(http.StatusConflict, wire.CodeConflict, "%s is not a regular file", p)
	}
	return fd, fi, nil
}

// read serves a file's bytes with its version as ETag and its digest as
// Repr-Digest, computed before the body (or remembered from the write that
// made it), so both are headers. Range and conditional requests follow
// http.ServeContent.
func (f *fileService) read(w http.ResponseWriter, r *http.Request) error {
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
		var (
			fd  *os.File
			fi  fs.FileInfo
			sum []byte
		)
		for attempt := 0; ; attempt++ {
			if fd, fi, err = l.openRegular(p); err != nil {
				return err
			}
			if sum, err = f.digest(fd, fi); err == nil {
				break
			}
			fd.Close()
			if !errors.Is(err, errChanged) {
				return fsError(p, err)
			}
			if attempt == 3 {
				return errorf(http.StatusConflict, wire.CodeConflict, "%s keeps changing while it is read; try again when it is still", p)
			}
		}
		defer fd.Close()
		st := statOf(fi)
		version := versionOf(st)
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("ETag", `"`+version+`"`)
		h.Set("Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum)+":")
		// The size and offsets are those of the stat: bytes appended since are
		// not served.
		http.ServeContent(w, r, "", fi.ModTime(), io.NewSectionReader(fd, 0, fi.Size()))
		if fi2, err := fd.Stat(); err == nil && versionOf(statOf(fi2)) != version {
			// Changed in place while it was sent: cut the answer short so the
			// client cannot take it for the file.
			panic(http.ErrAbortHandler)
		}
		return nil
	})
}

var errChanged = errors.New("file changed while read")

// digest returns the sha-256 of the file open as fd, from the cache when
// the version is the same, else by reading it.
func (f *fileService) digest(fd *os.File, fi fs.FileInfo) ([]byte, error) {
	st := statOf(fi)
	version := versionOf(st)
	if sum, ok := f.digests.get(st.Ino, version); ok {
		return sum, nil
	}
	h := sha256.New()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	if _, err := io.CopyBuffer(h, io.NewSectionReader(fd, 0, fi.Size()), *bp); err != nil {
		return nil, err
	}
	fi2, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	if versionOf(statOf(fi2)) != version {
		return nil, errChanged
	}
	sum := h.Sum(nil)
	f.digests.put(st.Ino, version, sum)
	return sum, nil
}

// writeOptions are the parameters of a write.
type writeOptions struct {
	uid, gid    int
	chown       bool // set uid:gid on an existing file too
	mode        int  // -1: keep, or 0644 for a new file
	ifMatch     []string
	ifNoneMatch bool
	sha256      string // hex, or "" (the trailer may still say)
	xattrs      map[string]string
}

func parseWriteOptions(r *http.Request) (writeOptions, error) {
	q := r.URL.Query()
	o := writeOptions{mode: -1, ifMatch: q["if_match"]}
	var err error
	if o.uid, err = intParam(q.Get("uid"), 0, 0, 1<<31-1, "uid"); err != nil {
		return o, err
	}
	if o.gid, err = intParam(q.Get("gid"), 0, 0, 1<<31-1, "gid"); err != nil {
		return o, err
	}
	o.chown = q.Get("chown") == "true"
	o.ifNoneMatch = q.Get("if_none_match") == "true"
	if v := q.Get("mode"); v != "" {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m > 0o7777 {
			return o, errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "mode %q must be octal permission bits such as 0644", v)
		}
		o.mode = int(m)
	}
	if v := q.Get("sha256"); v != "" {
		if o.sha256, err = checkSHA256(v); err != nil {
			return o, err
		}
	}
	if o.xattrs, err = parseXattrs(q.Get("xattrs")); err != nil {
		return o, err
	}
	return o, nil
}

func checkSHA256(v string) (string, error) {
	b, err := hex.DecodeString(v)
	if err != nil || len(b) != sha256.Size {
		return "", errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "sha256 %q must be 64 hex digits", v)
	}
	return strings.ToLower(v), nil
}

// checkPreconditions compares the current state of the target (cur, nil
// when there is none) with If-Match and If-None-Match.
func checkPreconditions(p string, cur fs.FileInfo, ifMatch []string, ifNoneMatch bool) error {
	exists := cur != nil
	if ifNoneMatch && exists {
		return errorf(http.StatusPreconditionFailed, wire.CodePreconditionFailed, "%s exists (If-None-Match: *); nothing was written", p)
	}
	if len(ifMatch) == 0 {
		return nil
	}
	if !exists {
		return errorf(http.StatusPreconditionFailed, wire.CodePreconditionFailed, "%s does not exist, so it cannot match the version given in If-Match; nothing was written", p)
	}
	v := versionOf(statOf(cur))
	for _, m := range ifMatch {
		if m == "*" || m == v {
			return nil
		}
	}
	return errorf(http.StatusPreconditionFailed, wire.CodePreconditionFailed, "%s changed: its version is %q, not %q (If-Match); read it again, then retry; nothing was written", p, v, strings.Join(ifMatch, ", "))
}

// currentAt is the file that a write of name in dir replaces: nil when
// there is none (or a symlink, which the write replaces).
func currentAt(dir *os.File, name string) fs.FileInfo {
	if fi, ok := existing(dir, name); ok {
		return fi
	}
	return nil
}

// commit gives the file its mode, owner and a fine modification time, and
// renames it to name in its directory. The caller holds the target's lock.
func (t *tempFile) commit(p, name string, mode, uid, gid int) (fs.FileInfo, error) {
	if err := t.Chmod(fs.FileMode(mode&0o777) | modeBits(mode)); err != nil {
		return nil, fsError(p, err)
	}
	if os.Geteuid() == 0 {
		if err := t.Chown(uid, gid); err != nil {
			return nil, fsError(p, err)
		}
		// chown clears setuid and setgid: set them again.
		if mode&0o7000 != 0 {
			if err := t.Chmod(fs.FileMode(mode&0o777) | modeBits(mode)); err != nil {
				return nil, fsError(p, err)
			}
		}
	}
	if err := futimens(t.File, time.Now()); err != nil {
		return nil, fsError(p, err)
	}
	if err := unix.Renameat(int(t.dir.Fd()), t.name, int(t.dir.Fd()), name); err != nil {
		return nil, fsError(p, err)
	}
	t.done = true
	fi, err := t.Stat()
	if err != nil {
		return nil, fsError(p, err)
	}
	return fi, nil
}

func modeBits(mode int) fs.FileMode {
	var m fs.FileMode
	if mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// keepOrSet returns the mode and owner a write gives the target: what the
// caller asked, else what the file had (cur), else 0644 and uid:gid.
func keepOrSet(cur fs.FileInfo, o writeOptions) (mode, uid, gid int) {
	mode, uid, gid = o.mode, o.uid, o.gid
	if cur != nil {
		st := statOf(cur)
		if mode < 0 {
			mode = int(st.Mode & 0o7777)
		}
		if !o.chown {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	if mode < 0 {
		mode = 0o644
	}
	return mode, uid, gid
}

// write stores the body as the file's new content, atomically.
func (f *fileService) write(w http.ResponseWriter, r *http.Request) error {
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
		isDir := errorf(http.StatusConflict, wire.CodeConflict, "%s is a directory; give the path of a file in it", p)
		if l.isRoot() {
			return isDir
		}
		target := l.path()
		var cur fs.FileInfo
		if l.exists && !l.dangling {
			if cur = currentAt(l.dir, l.name()); cur != nil && cur.IsDir() {
				return isDir
			}
		}
		// Fail fast, before the body; checked again under the lock.
		if err := checkPreconditions(p, cur, o.ifMatch, o.ifNoneMatch); err != nil {
			return err
		}
		dir, err := makeParents(p, l, o.uid, o.gid)
		if err != nil {
			return err
		}
		defer dir.Close()
		tmp, err := createTempIn(p, dir, ".cove-upload-")
		if err != nil {
			return err
		}
		defer tmp.discard()
		h := sha256.New()
		if _, err := copyHashed(&appender{f: tmp.File}, r.Body, h); err != nil {
			return uploadError(p, err)
		}
		if err := tmp.Sync(); err != nil {
			return fsError(p, err)
		}
		sum := h.Sum(nil)
		if err := writeXattrs(p, tmp.File, o.xattrs); err != nil {
			return err
		}
		wants := []string{o.sha256}
		if t := r.Trailer.Get(wire.TrailerSHA256); t != "" {
			w, err := checkSHA256(t)
			if err != nil {
				return err
			}
			wants = append(wants, w)
		}
		for _, want := range wants {
			if want != "" && want != hex.EncodeToString(sum) {
				return errorf(http.StatusUnprocessableEntity, wire.CodeUnprocessable,
					"the bytes received have sha-256 %s, not %s as the request's digest says; nothing was written", hex.EncodeToString(sum), want)
			}
		}

		unlock := f.locks.Lock(target)
		defer unlock()
		cur = currentAt(dir, l.name())
		if cur != nil && cur.IsDir() {
			return isDir
		}
		if err := checkPreconditions(p, cur, o.ifMatch, o.ifNoneMatch); err != nil {
			return err
		}
		mode, uid, gid := keepOrSet(cur, o)
		fi, err := tmp.commit(p, l.name(), mode, uid, gid)
		if err != nil {
			return err
		}
		st := statOf(fi)
		f.digests.put(st.Ino, versionOf(st), sum)
		status := http.StatusOK
		if cur == nil {
			status = http.StatusCreated
		}
		info := infoOf(p, fi, "")
		info.Xattrs = readXattrs(int(tmp.Fd()))
		writeJSON(w, status, info)
		return nil
	})
}

// uploadError tells a write error of the file (disk full) from a read error
// of the body (the host went away).
func uploadError(p string, err error) error {
	var errno syscall.Errno
	var pe *fs.PathError
	if errors.As(err, &pe) || errors.As(err, &errno) {
		return fsError(p, err)
	}
	return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "the upload of %s was cut short (%v); nothing was written", p, err)
}

func (f *fileService) mkdir(w http.ResponseWriter, r *http.Request) error {
	var req wire.MkdirRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	p, err := checkPath(req.Path)
	if err != nil {
		return err
	}
	if req.UID < 0 || req.GID < 0 {
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "uid and gid must not be negative")
	}
	return inCall(func(c *fsCall) error {
		l, err := c.writable(p, true)
		if err != nil {
			return err
		}
		defer l.close()
		if l.isRoot() {
			info, err := l.entry(p)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, info)
			return nil
		}
		status := http.StatusCreated
		if l.exists {
			status = http.StatusOK
			if fi, err := statAt(l.dir, l.name()); err == nil && !fi.IsDir() {
				return errorf(http.StatusConflict, wire.CodeConflict, "%s is not a directory", l.path())
			}
		}
		parent, err := makeParents(p, l, req.UID, req.GID)
		if err != nil {
			return err
		}
		defer parent.Close()
		d, err := mkdirIn(l.path(), parent, l.name(), 0o755, req.UID, req.GID)
		if err != nil {
			return err
		}
		defer d.Close()
		fi, err := statAt(d, "")
		if err != nil {
			return fsError(p, err)
		}
		writeJSON(w, status, withXattrs(infoOf(p, fi, ""), d, "", fi))
		return nil
	})
}

func (f *fileService) move(w http.ResponseWriter, r *http.Request) error {
	var req wire.MoveRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	from, err := checkPath(req.From)
	if err != nil {
		return err
	}
	to, err := checkPath(req.To)
	if err != nil {
		return err
	}
	if from == "/" || to == "/" {
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "the root directory cannot be moved or replaced")
	}
	return inCall(func(c *fsCall) error {
		lf, err := c.writable(from, false)
		if err != nil {
			return err
		}
		defer lf.close()
		lt, err := c.writable(to, false)
		if err != nil {
			return err
		}
		defer lt.close()
		if !lf.exists {
			return fsError(from, unix.ENOENT)
		}
		if _, err := statAt(lf.dir, lf.name()); err != nil {
			return fsError(from, err)
		}
		dir, err := makeParents(to, lt, req.UID, req.GID)
		if err != nil {
			return err
		}
		defer dir.Close()
		first, second := lf.path(), lt.path()
		if second < first {
			first, second = second, first
		}
		unlock := f.locks.Lock(first)
		defer unlock()
		if second != first {
			unlock2 := f.locks.Lock(second)
			defer unlock2()
		}
		ffd, tfd := int(lf.dir.Fd()), int(dir.Fd())
		if req.Overwrite {
			err = unix.Renameat(ffd, lf.name(), tfd, lt.name())
		} else {
			err = unix.Renameat2(ffd, lf.name(), tfd, lt.name(), unix.RENAME_NOREPLACE)
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
				// No RENAME_NOREPLACE here: check, then rename.
				if _, lerr := statAt(dir, lt.name()); lerr == nil {
					err = unix.EEXIST
				} else {
					err = unix.Renameat(ffd, lf.name(), tfd, lt.name())
				}
			}
			if errors.Is(err, unix.EEXIST) {
				return errorf(http.StatusConflict, wire.CodeConflict, "%s already exists; pass overwrite to replace it", to)
			}
		}
		if err != nil {
			return fsError(from, err)
		}
		info, err := entryAt(to, dir, lt.name())
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, info)
		return nil
	})
}

func (f *fileService) remove(w http.ResponseWriter, r *http.Request) error {
	p, err := queryPath(r, "path")
	if err != nil {
		return err
	}
	if p == "/" {
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "the root directory cannot be removed")
	}
	recursive := r.URL.Query().Get("recursive") == "true"
	return inCall(func(c *fsCall) error {
		l, err := c.writable(p, false)
		if err != nil {
			return err
		}
		defer l.close()
		if !l.exists {
			return fsError(p, unix.ENOENT)
		}
		fi, err := statAt(l.dir, l.name())
		if err != nil {
			return fsError(p, err)
		}
		unlock := f.locks.Lock(l.path())
		defer unlock()
		switch {
		case fi.IsDir() && recursive:
			err = removeAllIn(l.dir, l.name())
		case fi.IsDir():
			err = unix.Unlinkat(int(l.dir.Fd()), l.name(), unix.AT_REMOVEDIR)
		default:
			err = unix.Unlinkat(int(l.dir.Fd()), l.name(), 0)
		}
		if err != nil {
			if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
				return errorf(http.StatusConflict, wire.CodeConflict, "directory %s is not empty; pass recursive=true to remove it with its contents", p)
			}
			return fsError(p, err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// edit applies each edit in turn, each to the result of the ones before,
// streaming through temporary files; the last one replaces the file.
func (f *fileService) edit(w http.ResponseWriter, r *http.Request) error {
	var req wire.EditRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	p, err := checkPath(req.Path)
	if err != nil {
		return err
	}
	switch {
	case len(req.Edits) == 0:
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "edits is empty; give at least one {\"old\", \"new\"}")
	case len(req.Edits) > fspath.MaxEdits:
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "%d edits; at most %d are allowed in one call", len(req.Edits), fspath.MaxEdits)
	}
	for i, e := range req.Edits {
		if e.Old == "" {
			return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "edit %d: old is empty; give the exact text to replace", i)
		}
	}
	return inCall(func(c *fsCall) error {
		l, err := c.writable(p, true)
		if err != nil {
			return err
		}
		defer l.close()
		return f.editAt(w, p, l, req)
	})
}

func (f *fileService) editAt(w http.ResponseWriter, p string, l *location, req wire.EditRequest) error {
	unlock := f.locks.Lock(l.path())
	defer unlock()
	src, fi, err := l.openRegular(p)
	if err != nil {
		return err
	}
	defer src.Close()
	version := versionOf(statOf(fi))
	if len(req.IfMatch) > 0 && !slices.Contains(req.IfMatch, version) && !slices.Contains(req.IfMatch, "*") {
		return errorf(http.StatusPreconditionFailed, wire.CodePreconditionFailed, "%s changed: its version is %q, not %q (If-Match); read it again, then retry; nothing was written", p, version, strings.Join(req.IfMatch, ", "))
	}
	cur, size := io.ReaderAt(src), fi.Size()
	var sum []byte
	var last *tempFile
	for i, e := range req.Edits {
		off, n, err := findOnce(cur, size, []byte(e.Old))
		if err != nil {
			return fsError(p, err)
		}
		if n != 1 {
			what := "does not occur"
			if n > 1 {
				what = fmt.Sprintf("occurs %d times", n)
			}
			return errorf(http.StatusConflict, wire.CodeConflict, "edit %d: old %s in %s; it must occur exactly once (give more context); nothing was written", i, what, p)
		}
		tmp, err := createTempIn(p, l.dir, ".cove-edit-")
		if err != nil {
			return err
		}
		defer tmp.discard()
		h := sha256.New()
		bp := bufPool.Get().(*[]byte)
		mw := io.MultiWriter(tmp, h)
		_, err = io.CopyBuffer(mw, io.NewSectionReader(cur, 0, off), *bp)
		if err == nil {
			_, err = io.WriteString(mw, e.New)
		}
		if err == nil {
			_, err = io.CopyBuffer(mw, io.NewSectionReader(cur, off+int64(len(e.Old)), size-off-int64(len(e.Old))), *bp)
		}
		bufPool.Put(bp)
		if err != nil {
			return fsError(p, err)
		}
		cur, size, sum, last = tmp, size-int64(len(e.Old))+int64(len(e.New)), h.Sum(nil), tmp
	}
	// The edited file keeps its extended attributes.
	if err := writeXattrs(p, last.File, readXattrs(int(src.Fd()))); err != nil {
		return err
	}
	if err := last.Sync(); err != nil {
		return fsError(p, err)
	}
	// Commands in the sandbox may have written it meanwhile.
	if fi2, ok := existing(l.dir, l.name()); !ok || versionOf(statOf(fi2)) != version {
		return errorf(http.StatusConflict, wire.CodeConflict, "%s changed while it was edited; read it again, then retry; nothing was written", p)
	}
	st := statOf(fi)
	nfi, err := last.commit(p, l.name(), int(st.Mode&0o7777), int(st.Uid), int(st.Gid))
	if err != nil {
		return err
	}
	nst := statOf(nfi)
	f.digests.put(nst.Ino, versionOf(nst), sum)
	info := infoOf(p, nfi, "")
	info.Xattrs = readXattrs(int(last.Fd()))
	writeJSON(w, http.StatusOK, info)
	return nil
}

// findOnce finds old in the first size bytes of r: the offset of the first
// occurrence and how many there are, overlapping ones included, counted up
// to 2.
func findOnce(r io.ReaderAt, size int64, old []byte) (int64, int, error) {
	var buf []byte
	if 2*len(old) <= copyBuffer {
		bp := bufPool.Get().(*[]byte)
		defer bufPool.Put(bp)
		buf = *bp
	} else {
		buf = make([]byte, 2*len(old)+copyBuffer)
	}
	first, count := int64(-1), 0
	// Each window keeps the last len(old)-1 bytes of the one before: a
	// match across the boundary is seen once, and none is seen twice.
	var base int64 // file offset of buf[0]
	have := 0
	for pos := int64(0); pos < size; {
		want := int(min(int64(len(buf)-have), size-pos))
		n, err := r.ReadAt(buf[have:have+want], pos)
		if n < want {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF // it shrank
			}
			return 0, 0, err
		}
		pos += int64(n)
		have += n
		window := buf[:have]
		for i := 0; ; {
			j := bytes.Index(window[i:], old)
			if j < 0 {
				break
			}
			if count == 0 {
				first = base + int64(i+j)
			}
			if count++; count > 1 {
				return first, count, nil
			}
			i += j + 1
		}
		k := min(len(old)-1, have)
		copy(buf, window[have-k:])
		base += int64(have - k)
		have = k
	}
	return first, count, nil
}

// digestCache remembers the sha-256 of files by inode and version, so a
// file written through the agent is not read twice to be served.
type digestCache struct {
	mu sync.Mutex
	m  map[uint64]digestEntry
}

type digestEntry struct {
	version string
	sum     []byte
}

const maxDigests = 4096

func (c *digestCache) get(ino uint64, version string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[ino]
	if !ok || e.version != version {
		return nil, false
	}
	return e.sum, true
}

func (c *digestCache) put(ino uint64, version string, sum []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[uint64]digestEntry{}
	}
	if len(c.m) >= maxDigests {
		for k := range c.m { // drop an arbitrary one
			delete(c.m, k)
			break
		}
	}
	c.m[ino] = digestEntry{version: version, sum: sum}
}
