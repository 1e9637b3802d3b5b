package api

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"
)

// FileType is the kind of a file entry.
type FileType string

// File types.
const (
	FileTypeFile    FileType = "file"
	FileTypeDir     FileType = "dir"
	FileTypeSymlink FileType = "symlink"
	// FileTypeOther is a device, socket or FIFO: listed, never read or written.
	FileTypeOther FileType = "other"
)

// Values lists the file types: the enum of the OpenAPI document.
func (FileType) Values() []string {
	return []string{string(FileTypeFile), string(FileTypeDir), string(FileTypeSymlink), string(FileTypeOther)}
}

// FileEntry is one file of a sandbox (API.md "Files").
type FileEntry struct {
	Name string `json:"name"`
	// Absolute inside the sandbox.
	Path string   `json:"path"`
	Type FileType `json:"type"`
	Size int64    `json:"size"`
	// Permission bits in octal, e.g. "0644".
	Mode  string    `json:"mode"`
	MTime time.Time `json:"mtime"`
	// Opaque; changes whenever the content changes. The ETag of downloads
	// (quoted) and what If-Match compares.
	Version string `json:"version"`
	UID     int    `json:"uid"`
	GID     int    `json:"gid"`
	// Target is where a symlink points, as written in it.
	Target string `json:"target,omitempty"`
	// Xattrs are the user.* extended attributes of a regular file or a
	// directory (full names as keys): at most 32, with at most 4096 bytes
	// of names and values together; others are left out.
	Xattrs map[string]string `json:"xattrs,omitempty"`
}

// FileEdit replaces the one occurrence of Old by New.
type FileEdit struct {
	Old string `json:"old" schema:"minLength=1"`
	New string `json:"new"`
}

// EditFileRequest is the body of PATCH …/files/content.
type EditFileRequest struct {
	Edits []FileEdit `json:"edits" schema:"maxItems=100"`
}

// MkdirRequest is the body of POST …/files/mkdir.
type MkdirRequest struct {
	Path string `json:"path"`
}

// MoveRequest is the body of POST …/files/move.
type MoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite" schema:"optional default=false"`
}

// ArchiveResult is the answer of PUT …/files/archive.
type ArchiveResult struct {
	Path string `json:"path"`
	// Files, directories and links extracted.
	Entries int64 `json:"entries"`
	// Bytes of regular files extracted.
	Bytes int64 `json:"bytes"`
}

// ParseReprDigest returns the sha-256 of a Repr-Digest or Content-Digest
// field value (RFC 9530) such as `sha-256=:<base64>:, sha-512=:…:`. It
// returns nil and no error when the field has no sha-256.
func ParseReprDigest(v string) ([]byte, error) {
	for _, item := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "sha-256") {
			continue
		}
		val = strings.TrimSpace(val)
		if len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
			return nil, fmt.Errorf("sha-256 digest %q must be :base64:", val)
		}
		sum, err := base64.StdEncoding.DecodeString(val[1 : len(val)-1])
		if err != nil || len(sum) != 32 {
			return nil, fmt.Errorf("sha-256 digest %q is not 32 bytes in base64", val)
		}
		return sum, nil
	}
	return nil, nil
}

// FormatReprDigest is the Repr-Digest field value of a sha-256.
func FormatReprDigest(sum []byte) string {
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum) + ":"
}
