// Package fspath checks the paths and versions of sandbox files and holds
// the limits of file calls. The control plane checks a request with it
// before anything reaches a node, the host's agent client checks what the
// agent answers, and the agent checks again, so all three agree on one
// definition. It imports only the standard library.
package fspath

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// Limits of file calls.
const (
	// MaxPath is the longest path accepted.
	MaxPath = 4096
	// MaxListLimit is the most entries of one list page.
	MaxListLimit = 1000
	// MaxListDepth is the deepest list.
	MaxListDepth = 32
	// MaxEdits is the most edits of one edit call.
	MaxEdits = 100
	// MaxVersion is the longest version accepted.
	MaxVersion = 64
)

// Clean checks that p is a usable absolute path and returns it cleaned.
func Clean(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("path is empty; give an absolute path such as /workspace/main.py")
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("path contains a NUL byte")
	case !strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("path %q is relative; give an absolute path such as /workspace/%s", p, p)
	case len(p) > MaxPath:
		return "", fmt.Errorf("path is longer than %d bytes", MaxPath)
	}
	return path.Clean(p), nil
}

// ValidVersion reports whether v looks like a file version the agent makes.
func ValidVersion(v string) bool {
	if v == "" || len(v) > MaxVersion {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Bounds of the extended attributes a file call reads or writes.
const (
	// XattrPrefix starts every name a file call reads or writes.
	XattrPrefix = "user."
	// MaxXattrs is how many a file entry carries or a write sets.
	MaxXattrs = 32
	// MaxXattrBytes bounds their names and values together.
	MaxXattrBytes = 4096
	// MaxXattrName is the kernel's bound of one name (XATTR_NAME_MAX).
	MaxXattrName = 255
)

// CheckXattrs says why a set of extended attributes cannot be written, or
// nil: names must be user.NAME of at most MaxXattrName bytes without NUL,
// names and values UTF-8, within MaxXattrs and MaxXattrBytes.
func CheckXattrs(x map[string]string) error {
	if len(x) > MaxXattrs {
		return fmt.Errorf("%d extended attributes; a file has at most %d", len(x), MaxXattrs)
	}
	size := 0
	for name, v := range x {
		switch {
		case !strings.HasPrefix(name, XattrPrefix) || len(name) == len(XattrPrefix):
			return fmt.Errorf("extended attribute %q: only user.NAME can be set (trusted.*, security.* and system.* are the system's)", name)
		case len(name) > MaxXattrName:
			return fmt.Errorf("extended attribute %.40q…: a name has at most %d bytes", name, MaxXattrName)
		case strings.IndexByte(name, 0) >= 0 || !utf8.ValidString(name) || !utf8.ValidString(v):
			return fmt.Errorf("extended attribute %q: names and values must be UTF-8 without NUL in the name", name)
		}
		size += len(name) + len(v)
	}
	if size > MaxXattrBytes {
		return fmt.Errorf("extended attributes of %d bytes (names and values); a file has at most %d", size, MaxXattrBytes)
	}
	return nil
}
