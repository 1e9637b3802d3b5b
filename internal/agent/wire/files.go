package wire

import (
	"fmt"
	"path"
	"strings"
)

// File calls, added to version 1. Every path is absolute inside the
// sandbox and resolved by the agent, which runs there: symlinks resolve
// within the sandbox's own root, never the host's.
//
//	GET    /v1/files/stat?path=P                      FileInfo (lstat: a symlink is itself)
//	GET    /v1/files/list?path=DIR&depth=N&limit=N&after=CURSOR
//	                                                  FileList, in walk order
//	GET    /v1/files/content?path=P                   the bytes; ETag, Repr-Digest; Range
//	PUT    /v1/files/content?path=P&uid=&gid=[&mode=0644][&chown=true]
//	       [&if_match=V]…[&if_none_match=true][&sha256=HEX]
//	                                                  body: the bytes; answer: FileInfo
//	                                                  (201 created, 200 replaced).
//	                                                  The trailer Cove-Sha256 may carry
//	                                                  the digest when it is known only at
//	                                                  the end of the body.
//	POST   /v1/files/edit                             EditRequest → FileInfo
//	POST   /v1/files/mkdir                            MkdirRequest → FileInfo
//	POST   /v1/files/move                             MoveRequest → FileInfo
//	DELETE /v1/files?path=P&recursive=true            204
//	GET    /v1/files/archive?path=DIR                 tar.gz of DIR
//	PUT    /v1/files/archive?path=DIR&uid=&gid=       body: tar or tar.gz → ArchiveResult
//
// Writes are atomic: the bytes go to a temporary file in the target's
// directory, are checked (digest, If-Match) under a per-path lock and are
// renamed into place, so a failed or refused write leaves the old content.

// FileInfo is one entry as the agent reports it.
type FileInfo struct {
	Name    string `json:"name"`
	Path    string `json:"path"`
	Type    string `json:"type"` // FileTypeFile, …
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"` // permission bits with setuid, setgid and sticky (07777)
	MTimeNS int64  `json:"mtime_ns"`
	Version string `json:"version"`
	UID     int    `json:"uid"`
	GID     int    `json:"gid"`
	Target  string `json:"target,omitempty"` // of a symlink
}

// File types of FileInfo.Type.
const (
	FileTypeFile    = "file"
	FileTypeDir     = "dir"
	FileTypeSymlink = "symlink"
	FileTypeOther   = "other"
)

// FileList is a page of GET /v1/files/list. Next, when not empty, is the
// `after` of the next page.
type FileList struct {
	Items []FileInfo `json:"items"`
	Next  string     `json:"next,omitempty"`
}

// Limits of file calls.
const (
	// MaxPath is the longest path the agent accepts.
	MaxPath = 4096
	// MaxListLimit is the most entries of one list page.
	MaxListLimit = 1000
	// MaxListDepth is the deepest list.
	MaxListDepth = 32
	// MaxEdits is the most edits of one EditRequest.
	MaxEdits = 100
	// MaxListBytes bounds a page's JSON well below MaxJSON.
	MaxListBytes = MaxJSON / 2
	// maxVersion is the longest version the host accepts.
	maxVersion = 64
)

// TrailerSHA256 is the request trailer that may carry the hex sha-256 of an
// upload when it is known only after the body.
const TrailerSHA256 = "Cove-Sha256"

// EditRequest is the body of POST /v1/files/edit: each edit in turn must
// match exactly once in the result of the ones before.
type EditRequest struct {
	Path    string     `json:"path"`
	IfMatch []string   `json:"if_match,omitempty"`
	Edits   []FileEdit `json:"edits"`
}

// FileEdit replaces the one occurrence of Old by New.
type FileEdit struct {
	Old string `json:"old"`
	New string `json:"new"`
}

// MkdirRequest is the body of POST /v1/files/mkdir: missing parents are
// created too, owned by UID:GID.
type MkdirRequest struct {
	Path string `json:"path"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
}

// MoveRequest is the body of POST /v1/files/move. Missing parents of To are
// created, owned by UID:GID.
type MoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite"`
	UID       int    `json:"uid"`
	GID       int    `json:"gid"`
}

// ArchiveResult answers PUT /v1/files/archive.
type ArchiveResult struct {
	Entries int64 `json:"entries"`
	Bytes   int64 `json:"bytes"`
}

// CleanPath checks that p is a usable absolute path and returns it cleaned.
func CleanPath(p string) (string, error) {
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

// ValidVersion reports whether v looks like a version the agent makes.
func ValidVersion(v string) bool {
	if v == "" || len(v) > maxVersion {
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

// CheckFileInfo validates an entry from the (untrusted) agent.
func CheckFileInfo(fi FileInfo) error {
	switch {
	case fi.Type != FileTypeFile && fi.Type != FileTypeDir && fi.Type != FileTypeSymlink && fi.Type != FileTypeOther:
		return fmt.Errorf("bad file type %q from agent", fi.Type)
	case fi.Size < 0:
		return fmt.Errorf("bad file size %d from agent", fi.Size)
	case fi.Mode > 0o7777:
		return fmt.Errorf("bad file mode %o from agent", fi.Mode)
	case !ValidVersion(fi.Version):
		return fmt.Errorf("bad file version %q from agent", fi.Version)
	case fi.UID < 0 || fi.GID < 0:
		return fmt.Errorf("bad file owner %d:%d from agent", fi.UID, fi.GID)
	case len(fi.Name) > 255 || (strings.ContainsAny(fi.Name, "/\x00") && !(fi.Name == "/" && fi.Path == "/")):
		return fmt.Errorf("bad file name %q from agent", fi.Name)
	case len(fi.Target) > MaxPath || strings.IndexByte(fi.Target, 0) >= 0:
		return fmt.Errorf("bad symlink target from agent")
	}
	if p, err := CleanPath(fi.Path); err != nil || p != fi.Path {
		return fmt.Errorf("bad file path %q from agent", fi.Path)
	}
	return nil
}
