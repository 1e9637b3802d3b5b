package guest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/fspath"
)

// Extended attributes (see wire/files.go; bounds in fspath): only user.* names, read and
// written through a descriptor the call opened itself (never by path, so
// nobody in the sandbox can swap the file for a symlink in between), with
// the call's rights. The kernel refuses user.* on anything but regular
// files and directories, so only those are opened for them.

// xattrListMax is the kernel's bound of a name list (XATTR_LIST_MAX).
const xattrListMax = 64 << 10

// readXattrs returns the user.* extended attributes of the open file fd,
// within fspath's bounds, or nil when it has none (or its file system keeps
// none).
func readXattrs(fd int) map[string]string {
	buf := make([]byte, xattrListMax)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil || n <= 0 {
		return nil
	}
	var names []string
	for _, b := range bytes.Split(buf[:n], []byte{0}) {
		if name := string(b); strings.HasPrefix(name, fspath.XattrPrefix) && len(name) > len(fspath.XattrPrefix) && utf8.ValidString(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out map[string]string
	used := 0
	val := make([]byte, fspath.MaxXattrBytes)
	for _, name := range names {
		if len(out) == fspath.MaxXattrs {
			break
		}
		room := fspath.MaxXattrBytes - used - len(name)
		if room < 0 {
			continue
		}
		// A value larger than the room left answers ERANGE: left out.
		n, err := unix.Fgetxattr(fd, name, val[:room])
		if err != nil || !utf8.Valid(val[:n]) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = string(val[:n])
		used += len(name) + n
	}
	return out
}

// xattrsAt reads the extended attributes of the entry name in dir (""
// for dir itself), which fi describes, through a descriptor opened for
// it; an entry that is not a regular file or a directory, or that cannot
// be opened with the call's rights, or was replaced since fi, has none.
func xattrsAt(dir *os.File, name string, fi fs.FileInfo) map[string]string {
	m := fi.Mode()
	if !m.IsRegular() && !m.IsDir() {
		return nil
	}
	if name == "" {
		name = "."
	}
	f, err := openIn(dir, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil
	}
	if want := statOf(fi); st.Dev != want.Dev || st.Ino != want.Ino {
		return nil // replaced since it was looked at
	}
	return readXattrs(int(f.Fd()))
}

// withXattrs completes info with the extended attributes of the entry.
func withXattrs(info wire.FileInfo, dir *os.File, name string, fi fs.FileInfo) wire.FileInfo {
	info.Xattrs = xattrsAt(dir, name, fi)
	return info
}

// writeXattrs sets each extended attribute of x on the open file f (a new
// file of a write, before it is renamed into place).
func writeXattrs(p string, f *os.File, x map[string]string) error {
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range x {
			if !yield(k) {
				return
			}
		}
	}) {
		if err := unix.Fsetxattr(int(f.Fd()), name, []byte(x[name]), 0); err != nil {
			return xattrError(p, name, err)
		}
	}
	return nil
}

// xattrError explains a refused extended attribute.
func xattrError(p, name string, err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case unix.ENOTSUP:
			return errorf(http.StatusConflict, wire.CodeConflict, "%s: the sandbox's file system keeps no extended attributes here (%s)", p, name)
		case unix.ENOSPC, unix.E2BIG, unix.ERANGE:
			return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "%s: the file system has no room for extended attribute %s (%v)", p, name, errno)
		}
	}
	return fsError(p, err)
}

// parseXattrs reads the xattrs parameter of a write: a JSON object of
// user.* names to values, checked against wire's bounds.
func parseXattrs(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	var x map[string]string
	if err := json.Unmarshal([]byte(v), &x); err != nil {
		return nil, errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "xattrs must be a JSON object of names to string values: %v", err)
	}
	if err := fspath.CheckXattrs(x); err != nil {
		return nil, errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "%v", err)
	}
	return x, nil
}
