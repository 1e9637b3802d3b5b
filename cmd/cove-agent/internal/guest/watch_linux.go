package guest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// A watch (wire/watch.go) is one inotify instance of its own, read through
// Go's poller, with one inotify watch per directory it covers. Each
// directory is held open (O_PATH) and added by its descriptor
// (/proc/self/fd/N), never by a path: nothing in the sandbox can swap a
// directory for a symlink between the look and the add. Entries are
// described relative to their directory's descriptor, not followed, and
// reported under the path the host named: only paths inside the sandbox
// ever leave.

// watchMask is what a watched directory reports.
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
	unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// watchedDir is one directory of a watch.
type watchedDir struct {
	dir  *os.File // O_PATH
	path string   // as the host names it
	real string   // from the sandbox's root, symlinks resolved
}

type dirWatcher struct {
	fd        int
	f         *os.File // the inotify instance, for reads through the poller
	recursive bool
	dirs      map[int32]*watchedDir
	root      int32
	out       *bufio.Writer
	enc       *json.Encoder
}

func (f *fileService) watch(w http.ResponseWriter, r *http.Request) error {
	p, err := queryPath(r, "path")
	if err != nil {
		return err
	}
	recursive := false
	if v := r.URL.Query().Get("recursive"); v != "" {
		if recursive, err = strconv.ParseBool(v); err != nil {
			return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "recursive must be true or false")
		}
	}
	var dir *os.File
	var real string
	err = inCall(func(c *fsCall) error {
		l, err := c.resolve(p, true)
		if err != nil {
			return err
		}
		defer l.close()
		d, err := l.openDir(p, "watch the directory that holds it")
		if err != nil {
			return err
		}
		real = l.path()
		if protected(real) {
			d.Close()
			return errorf(http.StatusForbidden, wire.CodePermissionDenied, "%s is in /proc, /sys, /dev or /.cove, which cannot be watched", p)
		}
		dir = d
		return nil
	})
	if err != nil {
		return err
	}
	defer dir.Close()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return errorf(http.StatusTooManyRequests, wire.CodeResourceExhausted, "cannot watch %s: %v (too many watches in this sandbox)", p, err)
	}
	dw := &dirWatcher{fd: fd, f: os.NewFile(uintptr(fd), "inotify"), recursive: recursive, dirs: map[int32]*watchedDir{}}
	defer dw.close()
	root, err := dw.add(dir, "", p, real)
	if err != nil {
		return err
	}
	dw.root = root
	if recursive {
		if err := dw.addTree(dir, p, real, nil); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(r.Context(), func() { dw.f.Close() })
	defer stop()

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	dw.out = bufio.NewWriterSize(w, 64<<10)
	dw.enc = json.NewEncoder(dw.out)
	rc := http.NewResponseController(w)
	dw.enc.Encode(wire.WatchEvent{Type: wire.WatchStart})
	if dw.out.Flush() != nil || rc.Flush() != nil {
		return nil
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := dw.f.Read(buf)
		if err != nil {
			return nil // the host went (the descriptor is closed) or the instance failed: the stream ends
		}
		done := dw.handle(buf[:n])
		if dw.out.Flush() != nil || rc.Flush() != nil || done {
			return nil
		}
	}
}

func (dw *dirWatcher) close() {
	for _, d := range dw.dirs {
		d.dir.Close()
	}
	dw.f.Close()
}

// add watches the directory open as dir (its own descriptor when name is
// "", else its entry name) and returns its watch descriptor.
func (dw *dirWatcher) add(parent *os.File, name, p, real string) (int32, error) {
	if len(dw.dirs) >= wire.MaxWatchDirs {
		return 0, errorf(http.StatusTooManyRequests, wire.CodeResourceExhausted,
			"%s: a watch covers at most %d directories; watch a smaller tree", p, wire.MaxWatchDirs)
	}
	var d *os.File
	var err error
	if name == "" {
		d, err = openat2(parent, ".", unix.O_PATH|unix.O_DIRECTORY, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	} else {
		d, err = openat2(parent, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	}
	if err != nil {
		return 0, fsError(p, err)
	}
	wd, err := unix.InotifyAddWatch(dw.fd, "/proc/self/fd/"+strconv.Itoa(int(d.Fd())), watchMask)
	if err != nil {
		d.Close()
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.ENOMEM) {
			return 0, errorf(http.StatusTooManyRequests, wire.CodeResourceExhausted, "%s: the sandbox has no inotify watches left (%v)", p, err)
		}
		return 0, fsError(p, err)
	}
	if old, ok := dw.dirs[int32(wd)]; ok {
		old.dir.Close() // the same directory again (moved): keep the newest name
	}
	dw.dirs[int32(wd)] = &watchedDir{dir: d, path: p, real: real}
	return int32(wd), nil
}

// addTree watches every directory below dir (open for reading or O_PATH,
// named p, at real). With report, each entry found is reported as a
// create: it is new (its directory was made after the watch started), and
// may have been written before its directory was watched.
func (dw *dirWatcher) addTree(dir *os.File, p, real string, report func(wire.WatchEvent)) error {
	d, err := openat2(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return fsError(p, err)
	}
	defer d.Close()
	names, err := readNames(d)
	if err != nil {
		return fsError(p, err)
	}
	for _, name := range names {
		cp, creal := path.Join(p, name), path.Join(real, name)
		fi, err := statAt(d, name)
		if err != nil {
			continue // gone since it was read
		}
		if report != nil {
			report(dw.event(wire.WatchCreate, cp, d, name))
		}
		if !fi.IsDir() || protected(creal) {
			continue
		}
		if _, err := dw.add(d, name, cp, creal); err != nil {
			var e *Error
			if errors.As(err, &e) && e.Code == wire.CodeResourceExhausted {
				return err
			}
			continue // gone or unreadable: not entered
		}
		sub, err := openat2(d, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
		if err != nil {
			continue
		}
		err = dw.addTree(sub, cp, creal, report)
		sub.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// event describes name in dir as p; a name gone since has no entry.
func (dw *dirWatcher) event(typ, p string, dir *os.File, name string) wire.WatchEvent {
	ev := wire.WatchEvent{Type: typ, Path: p}
	if info, err := entryAt(p, dir, name); err == nil {
		ev.Entry = &info
	}
	return ev
}

func (dw *dirWatcher) send(ev wire.WatchEvent) { dw.enc.Encode(ev) }

// handle reports a read's events; it says whether the watched directory
// itself is gone.
func (dw *dirWatcher) handle(b []byte) (rootGone bool) {
	for len(b) >= unix.SizeofInotifyEvent {
		raw := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(raw.Len)
		if end > len(b) {
			return false
		}
		name := ""
		if raw.Len > 0 {
			nb := b[unix.SizeofInotifyEvent:end]
			for i, c := range nb {
				if c == 0 {
					nb = nb[:i]
					break
				}
			}
			name = string(nb)
		}
		mask, wd := raw.Mask, raw.Wd
		b = b[end:]
		if mask&unix.IN_Q_OVERFLOW != 0 {
			dw.send(wire.WatchEvent{Type: wire.WatchDropped, Count: 1})
			continue
		}
		d, ok := dw.dirs[wd]
		if !ok {
			continue
		}
		if mask&unix.IN_IGNORED != 0 {
			d.dir.Close()
			delete(dw.dirs, wd)
			if wd == dw.root {
				return true
			}
			continue
		}
		if name == "" {
			// The directory itself: its own removal or move is reported
			// by its parent, except for the watched one.
			if wd == dw.root && mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
				dw.send(wire.WatchEvent{Type: wire.WatchRemove, Path: d.path})
				return true
			}
			if wd == dw.root && mask&unix.IN_ATTRIB != 0 {
				dw.send(dw.event(wire.WatchChmod, d.path, d.dir, ""))
			}
			continue
		}
		p := path.Join(d.path, name)
		switch {
		case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			dw.send(dw.event(wire.WatchCreate, p, d.dir, name))
			if dw.recursive && mask&unix.IN_ISDIR != 0 {
				dw.enter(d, name)
			}
		case mask&unix.IN_MODIFY != 0:
			dw.send(dw.event(wire.WatchWrite, p, d.dir, name))
		case mask&unix.IN_ATTRIB != 0:
			dw.send(dw.event(wire.WatchChmod, p, d.dir, name))
		case mask&unix.IN_DELETE != 0:
			dw.send(wire.WatchEvent{Type: wire.WatchRemove, Path: p})
		case mask&unix.IN_MOVED_FROM != 0:
			dw.send(wire.WatchEvent{Type: wire.WatchRename, Path: p})
		}
	}
	return false
}

// enter watches a directory made (or moved in) under d after the watch
// started, and what it holds already.
func (dw *dirWatcher) enter(d *watchedDir, name string) {
	p, real := path.Join(d.path, name), path.Join(d.real, name)
	if protected(real) {
		return
	}
	if _, err := dw.add(d.dir, name, p, real); err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code == wire.CodeResourceExhausted {
			dw.send(wire.WatchEvent{Type: wire.WatchDropped, Count: 1})
		}
		return
	}
	sub, err := openat2(d.dir, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return
	}
	defer sub.Close()
	if err := dw.addTree(sub, p, real, dw.send); err != nil {
		dw.send(wire.WatchEvent{Type: wire.WatchDropped, Count: 1})
	}
}
