package guest

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// A file call acts with the agent's rights (root in the sandbox): the API's
// caller may write anywhere, as a command run as root could, and the user a
// call names only owns what it creates. What a call must never do is let
// someone in the sandbox choose where it acts. So:
//
//   - It resolves its paths itself, one name at a time, each opened with
//     openat2 relative to the directory before it and never followed by the
//     kernel (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS,
//     O_NOFOLLOW): a directory swapped for a symlink after it was looked at
//     cannot lead the call elsewhere, because the call acts through the
//     descriptors it holds. It starts again from the root with
//     RESOLVE_IN_ROOT.
//   - It follows a symlink by reading it, and when the symlink belongs to a
//     user other than root, the rest of the call runs with that user's file
//     system rights (fsuid, fsgid, no supplementary groups), on an OS thread
//     of the call's own that is never reused. A symlink that `user` planted
//     leads a call only where `user` could go and write.
//   - Symlinks in /proc that point to absolute paths or to kernel objects
//     (the magic links of /proc/PID/fd, cwd, root, exe, ns) are not
//     followed.
//   - The final name is created, replaced or removed relative to its
//     directory's descriptor (O_NOFOLLOW, O_EXCL, renameat, unlinkat),
//     ownership set through descriptors (fchown, or lchown of a symlink).

// maxSymlinks is how many symlinks one path may go through (the kernel's
// MAXSYMLINKS).
const maxSymlinks = 40

// fsCall is one file call: the OS thread it runs on and the rights it has.
type fsCall struct {
	root *os.File // the sandbox's "/", O_PATH

	// asUID and asGID are -1 while the call has the agent's rights, else
	// the owner of the symlink through which it went (via).
	asUID, asGID int
	via          string
	// tainted: the thread's credentials were changed (or a change was
	// tried); it must not run anything else.
	tainted bool
}

// inCall runs fn as a file call, on an OS thread of its own: fn may lower
// the thread's rights (fsCall.follow), and a thread whose rights were
// lowered ends with fn's goroutine instead of going back to Go's pool. A
// panic of fn (http.ErrAbortHandler) is raised again in the caller.
func inCall(fn func(c *fsCall) error) error {
	type result struct {
		err      error
		panicked any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		c := &fsCall{asUID: -1, asGID: -1}
		var r result
		func() {
			defer func() { r.panicked = recover() }()
			root, err := os.OpenFile("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				r.err = fmt.Errorf("open /: %w", err)
				return
			}
			defer root.Close()
			c.root = root
			r.err = c.explain(fn(c))
		}()
		if !c.tainted {
			runtime.UnlockOSThread()
		}
		done <- r
	}()
	r := <-done
	if r.panicked != nil {
		panic(r.panicked)
	}
	return r.err
}

// follow is called before the call goes through a symlink that uid:gid
// own, at link: from there on the call has that user's rights.
func (c *fsCall) follow(uid, gid uint32, link string) error {
	if uid == 0 || os.Geteuid() != 0 {
		return nil // root's symlinks lend no rights; an agent that is not root has none to lend
	}
	if c.asUID >= 0 {
		if uint32(c.asUID) == uid {
			return nil
		}
		return errorf(http.StatusForbidden, wire.CodePermissionDenied,
			"the path goes through symlinks of two users (%s of uid %d, %s of uid %d); file calls do not follow such paths", c.via, c.asUID, link, uid)
	}
	c.tainted = true
	if err := unix.Setgroups(nil); err != nil {
		return fmt.Errorf("drop groups to follow %s: %w", link, err)
	}
	unix.SetfsgidRetGid(int(gid))
	unix.SetfsuidRetUid(int(uid))
	// setfsuid and setfsgid do not say when they fail: ask again.
	if prev, _ := unix.SetfsgidRetGid(int(gid)); prev != int(gid) {
		return fmt.Errorf("take gid %d to follow %s: fsgid is %d", gid, link, prev)
	}
	if prev, _ := unix.SetfsuidRetUid(int(uid)); prev != int(uid) {
		return fmt.Errorf("take uid %d to follow %s: fsuid is %d", uid, link, prev)
	}
	c.asUID, c.asGID, c.via = int(uid), int(gid), link
	return nil
}

// lowered says the call has a user's rights instead of the agent's.
func (c *fsCall) lowered() bool { return c.asUID >= 0 }

// explain adds to a permission error of a call with lowered rights why it
// has them.
func (c *fsCall) explain(err error) error {
	var e *Error
	if err == nil || !c.lowered() || !errors.As(err, &e) || !e.denied {
		return err
	}
	return &Error{Status: e.Status, Code: e.Code, denied: true, Message: fmt.Sprintf(
		"%s; the path goes through %s, a symlink of uid %d, and a file call has only its owner's rights beyond it", e.Message, c.via, c.asUID)}
}

// location is where a path led: a directory, open, and the names below it.
type location struct {
	dir  *os.File // O_PATH, a directory
	real string   // dir's path from the root, every symlink resolved
	// rest holds the names below dir: the last is the path's final name;
	// any before it do not exist yet (a write creates them). Empty only for
	// the root itself.
	rest []string
	// exists: rest holds just the final name and it exists (dangling: as a
	// symlink whose target does not).
	exists, dangling bool
}

func (l *location) close() { l.dir.Close() }

// isRoot says the location is "/".
func (l *location) isRoot() bool { return len(l.rest) == 0 }

// name is the final name (not for the root).
func (l *location) name() string { return l.rest[len(l.rest)-1] }

// path is the location's real path.
func (l *location) path() string { return path.Join(append([]string{l.real}, l.rest...)...) }

// pendingName is a name still to resolve; link says it comes from a
// symlink's target.
type pendingName struct {
	name string
	link bool
}

func splitNames(p string, link bool) []pendingName {
	var out []pendingName
	for _, n := range strings.Split(p, "/") {
		if n != "" && n != "." {
			out = append(out, pendingName{n, link})
		}
	}
	return out
}

// resolve finds p (clean, absolute) for the call. Every symlink on the way
// is followed, the final one only with follow and only when what it points
// to exists (else the location is the symlink itself, dangling). Names
// missing below the deepest existing directory are left in rest, unless
// they come from a symlink (a missing target is "not found").
func (c *fsCall) resolve(p string, follow bool) (*location, error) {
	dir, err := c.reopen("/")
	if err != nil {
		return nil, fsError(p, err)
	}
	real := "/"
	todo := splitNames(p, false)
	links := 0
	var final *location // the path's own final symlink, while following it
	fail := func(err error) (*location, error) {
		dir.Close()
		if final != nil {
			final.close()
		}
		return nil, err
	}
	for len(todo) > 0 {
		n := todo[0]
		todo = todo[1:]
		if n.name == ".." {
			if real != "/" {
				up := path.Dir(real)
				nd, err := c.reopen(up)
				if err != nil {
					return fail(fsError(p, err))
				}
				dir.Close()
				dir, real = nd, up
			}
			continue
		}
		last := len(todo) == 0
		f, err := openName(dir, n.name)
		if errors.Is(err, unix.ENOENT) {
			if final != nil {
				dir.Close()
				final.dangling = true
				return final, nil
			}
			if n.link {
				return fail(fsError(p, err))
			}
			rest := []string{n.name}
			for _, t := range todo {
				rest = append(rest, t.name)
			}
			return &location{dir: dir, real: real, rest: rest}, nil
		}
		if err != nil {
			return fail(fsError(p, err))
		}
		var st unix.Stat_t
		if err := unix.Fstatat(int(f.Fd()), "", &st, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			f.Close()
			return fail(fsError(p, err))
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK && (!last || follow):
			link := path.Join(real, n.name)
			target, err := readLinkFD(f)
			if err != nil {
				err = fsError(link, err)
			} else {
				err = checkMagic(f, link, target)
			}
			f.Close()
			if err != nil {
				return fail(err)
			}
			if links++; links > maxSymlinks {
				return fail(fsError(p, unix.ELOOP))
			}
			if err := c.follow(st.Uid, st.Gid, link); err != nil {
				return fail(err)
			}
			if last && final == nil {
				fd, err := dupFile(dir)
				if err != nil {
					return fail(fsError(p, err))
				}
				final = &location{dir: fd, real: real, rest: []string{n.name}, exists: true}
			}
			if strings.HasPrefix(target, "/") {
				nd, err := c.reopen("/")
				if err != nil {
					return fail(fsError(p, err))
				}
				dir.Close()
				dir, real = nd, "/"
			}
			todo = append(splitNames(target, true), todo...)
		case last:
			f.Close()
			if final != nil {
				final.close()
			}
			return &location{dir: dir, real: real, rest: []string{n.name}, exists: true}, nil
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			f.Close()
			return fail(fsError(p, unix.ENOTDIR))
		default:
			dir.Close()
			dir, real = f, path.Join(real, n.name)
		}
	}
	// The path ends on a directory itself: the root, or a symlink whose
	// target ends in "." or "..".
	if final != nil {
		final.close()
	}
	if real == "/" {
		return &location{dir: dir, real: "/"}, nil
	}
	dir.Close()
	up := path.Dir(real)
	parent, err := c.reopen(up)
	if err != nil {
		return nil, fsError(p, err)
	}
	return &location{dir: parent, real: up, rest: []string{path.Base(real)}, exists: true}, nil
}

// reopen opens the directory at real, a path without symlinks, from the
// root.
func (c *fsCall) reopen(real string) (*os.File, error) {
	return openat2(c.root, real, unix.O_PATH|unix.O_DIRECTORY,
		unix.RESOLVE_IN_ROOT|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
}

// openat2 opens name in dir with how, retrying when the kernel asks to
// (EAGAIN: a rename raced a lookup of "..").
func openat2(dir *os.File, name string, flags int, resolve uint64) (*os.File, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolve}
	for range 16 {
		fd, err := unix.Openat2(int(dir.Fd()), name, how)
		switch {
		case err == nil:
			return os.NewFile(uintptr(fd), name), nil
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			continue
		default:
			return nil, err
		}
	}
	return nil, unix.EAGAIN
}

// openName opens one name in dir as O_PATH, not following it: a symlink
// is opened itself.
func openName(dir *os.File, name string) (*os.File, error) {
	return openat2(dir, name, unix.O_PATH|unix.O_NOFOLLOW,
		unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
}

// openIn opens one name in dir with flags (O_NOFOLLOW added): a symlink
// there fails with ELOOP.
func openIn(dir *os.File, name string, flags int, mode uint32) (*os.File, error) {
	how := &unix.OpenHow{
		Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), Mode: uint64(mode),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	if flags&(unix.O_CREAT|unix.O_TMPFILE) == 0 {
		how.Mode = 0
	}
	for range 16 {
		fd, err := unix.Openat2(int(dir.Fd()), name, how)
		switch {
		case err == nil:
			return os.NewFile(uintptr(fd), name), nil
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			continue
		default:
			return nil, err
		}
	}
	return nil, unix.EAGAIN
}

// openDirIn opens the directory name in dir for reading its entries.
func openDirIn(dir *os.File, name string) (*os.File, error) {
	return openIn(dir, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// readLinkFD reads the target of a symlink opened as O_PATH.
func readLinkFD(f *os.File) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(int(f.Fd()), "", buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size > 2*unix.PathMax {
			return "", unix.ENAMETOOLONG
		}
	}
}

// readLinkAt reads the target of the symlink name in dir.
func readLinkAt(dir *os.File, name string) (string, error) {
	f, err := openName(dir, name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return readLinkFD(f)
}

// checkMagic refuses to follow a symlink of /proc that is not a plain
// relative name (/proc/self, /proc/mounts): the others jump to what a
// process holds, not to a path.
func checkMagic(f *os.File, link, target string) error {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return fsError(link, err)
	}
	if sfs.Type != unix.PROC_SUPER_MAGIC {
		return nil
	}
	if strings.HasPrefix(target, "/") || strings.Contains(target, ":") {
		return errorf(http.StatusForbidden, wire.CodePermissionDenied,
			"%s points to what a process holds (%s); file calls do not follow such links", link, target)
	}
	return nil
}

// statInfo is the fs.FileInfo of a file found by name in a directory.
type statInfo struct {
	name string
	st   syscall.Stat_t
}

var _ fs.FileInfo = (*statInfo)(nil)

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.st.Mode&syscall.S_IFMT == syscall.S_IFDIR }
func (s *statInfo) Sys() any           { return &s.st }

// Mode converts as package os does.
func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & syscall.S_IFMT {
	case syscall.S_IFBLK:
		m |= fs.ModeDevice
	case syscall.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFIFO:
		m |= fs.ModeNamedPipe
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if s.st.Mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// statAt describes name in dir without following it; name "" is dir
// itself.
func statAt(dir *os.File, name string) (*statInfo, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), name, &st, flags); err != nil {
		return nil, err
	}
	return &statInfo{name: name, st: syscall.Stat_t{
		Dev: st.Dev, Ino: st.Ino, Nlink: st.Nlink, Mode: st.Mode, Uid: st.Uid, Gid: st.Gid,
		Rdev: st.Rdev, Size: st.Size, Blksize: st.Blksize, Blocks: st.Blocks,
		Atim: syscall.Timespec{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec},
		Mtim: syscall.Timespec{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec},
		Ctim: syscall.Timespec{Sec: st.Ctim.Sec, Nsec: st.Ctim.Nsec},
	}}, nil
}

// existing describes the final name of l when it is there as anything but
// a symlink (a symlink at the final name is replaced, never written
// through).
func existing(dir *os.File, name string) (*statInfo, bool) {
	fi, err := statAt(dir, name)
	if err != nil || fi.Mode()&fs.ModeSymlink != 0 {
		return nil, false
	}
	return fi, true
}

// entryAt describes name in dir for an answer, as p.
func entryAt(p string, dir *os.File, name string) (wire.FileInfo, error) {
	fi, err := statAt(dir, name)
	if err != nil {
		return wire.FileInfo{}, fsError(p, err)
	}
	target := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ = readLinkAt(dir, name)
	}
	return withXattrs(infoOf(p, fi, target), dir, name, fi), nil
}

// chownFD gives the file open as f (O_PATH or not) to uid:gid, when the
// agent runs as root.
func chownFD(p string, f *os.File, uid, gid int) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := unix.Fchownat(int(f.Fd()), "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fsError(p, err)
	}
	return nil
}

// mkdirIn creates the directory name in dir owned by uid:gid (an existing
// directory is kept as it is) and opens it.
func mkdirIn(p string, dir *os.File, name string, mode uint32, uid, gid int) (*os.File, error) {
	err := unix.Mkdirat(int(dir.Fd()), name, mode)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fsError(p, err)
	}
	created := err == nil
	d, err := openName(dir, name)
	if err != nil {
		return nil, fsError(p, err)
	}
	if fi, err := statAt(d, ""); err != nil || !fi.IsDir() {
		d.Close()
		return nil, errorf(http.StatusConflict, wire.CodeConflict, "%s is not a directory", p)
	}
	if created {
		if err := chownFD(p, d, uid, gid); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// makeParents opens the directory that holds l's final name, creating the
// missing ones (mode 0755, owned by uid:gid). p names the path in errors.
func makeParents(p string, l *location, uid, gid int) (*os.File, error) {
	d, err := dupFile(l.dir)
	if err != nil {
		return nil, fsError(p, err)
	}
	real := l.real
	for _, n := range l.rest[:len(l.rest)-1] {
		real = path.Join(real, n)
		nd, err := mkdirIn(real, d, n, 0o755, uid, gid)
		d.Close()
		if err != nil {
			return nil, err
		}
		d = nd
	}
	return d, nil
}

// futimens sets the access and modification times of the open file f to
// t; a zero t leaves them.
func futimens(f *os.File, t time.Time) error {
	ts := [2]unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	if !t.IsZero() {
		ts[0], ts[1] = unix.NsecToTimespec(t.UnixNano()), unix.NsecToTimespec(t.UnixNano())
	}
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, f.Fd(), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// readNames lists the names in the directory open as d, sorted.
func readNames(d *os.File) ([]string, error) {
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// removeAllIn removes name from dir and, when it is a directory, all in it,
// through descriptors: nothing below is followed.
func removeAllIn(dir *os.File, name string) error {
	err := unix.Unlinkat(int(dir.Fd()), name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	for range 3 {
		d, err := openDirIn(dir, name)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		names, err := readNames(d)
		for _, n := range names {
			if err != nil {
				break
			}
			err = removeAllIn(d, n)
		}
		d.Close()
		if err != nil {
			return err
		}
		err = unix.Unlinkat(int(dir.Fd()), name, unix.AT_REMOVEDIR)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.ENOTEMPTY) {
			return err
		}
		// Something was created meanwhile: again.
	}
	return unix.ENOTEMPTY
}

// tempName is a new name for a temporary file or directory.
func tempName(prefix string) string {
	return prefix + strconv.FormatUint(rand.Uint64(), 36)
}

// tempFile is a new file in a directory that becomes another file there by
// rename, or is removed.
type tempFile struct {
	*os.File
	dir  *os.File
	name string
	done bool
}

// createTempIn creates a new file in dir, open for reading and writing.
func createTempIn(p string, dir *os.File, prefix string) (*tempFile, error) {
	for range 100 {
		name := tempName(prefix)
		fd, err := openIn(dir, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return nil, fsError(p, err)
		}
		return &tempFile{File: fd, dir: dir, name: name}, nil
	}
	return nil, fmt.Errorf("%s: no free temporary name", p)
}

// discard removes the file unless it was renamed.
func (t *tempFile) discard() {
	t.File.Close()
	if !t.done {
		unix.Unlinkat(int(t.dir.Fd()), t.name, 0)
	}
}
