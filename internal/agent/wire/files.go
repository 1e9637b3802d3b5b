package wire

// File calls, added to version 1. Every path is absolute inside the
// sandbox and resolved by the agent, which runs there: symlinks resolve
// within the sandbox's own root, never the host's.
//
//	GET    /v1/files/stat?path=P                      FileInfo (lstat: a symlink is itself)
//	GET    /v1/files/list?path=DIR&depth=N&limit=N&after=CURSOR
//	                                                  FileList, in walk order
//	GET    /v1/files/content?path=P                   the bytes; ETag, Repr-Digest; Range
//	PUT    /v1/files/content?path=P&uid=&gid=[&mode=0644][&chown=true]
//	       [&if_match=V]…[&if_none_match=true][&sha256=HEX][&xattrs=JSON]
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
// The new file is a new inode: it has the extended attributes the write's
// xattrs names (a JSON object, name → value) and no others, so a write
// without xattrs clears the ones the old content had. An edit keeps them.
//
// Every FileInfo of a regular file or a directory carries its user.*
// extended attributes (Xattrs), read through a descriptor of the entry, at
// most fspath.MaxXattrs of them with at most fspath.MaxXattrBytes of names
// and values together, in name order; ones that do not fit, or whose name or value is
// not UTF-8, are left out. Only user.* names are ever written: trusted.*,
// security.* and system.* are the kernel's and the image's.

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
	// Xattrs are the user.* extended attributes, full names as keys.
	Xattrs map[string]string `json:"xattrs,omitempty"`
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
	// MaxListBytes bounds a page's JSON well below MaxJSON.
	MaxListBytes = MaxJSON / 2
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
