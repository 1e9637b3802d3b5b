package wire

// File watches, added to version 1.
//
//	GET /v1/files/watch?path=DIR&recursive=true       NDJSON of WatchEvent
//
// The agent watches DIR (resolved as every file call resolves its paths)
// with inotify and, with recursive, every directory below it, including
// those made later (their contents found at that moment are reported as
// creates). The first line is a WatchStart once the watches are in
// place; then one line per event, until the host closes the stream or the
// directory itself goes (a remove of DIR, then the end).
//
// Paths are DIR as the host named it joined with the names below it:
// paths inside the sandbox. /proc, /sys, /dev and /.cove are not entered.

// Watch event types (WatchEvent.Type).
const (
	WatchStart   = "start"
	WatchCreate  = "create"
	WatchWrite   = "write"
	WatchRemove  = "remove"
	WatchRename  = "rename"
	WatchChmod   = "chmod"
	WatchDropped = "dropped"
)

// WatchEvent is one line of a watch stream.
type WatchEvent struct {
	Type  string    `json:"type"`
	Path  string    `json:"path,omitempty"`
	Entry *FileInfo `json:"entry,omitempty"`
	// Count is a dropped record's number of events lost (at least 1; the
	// kernel's queue overflow counts as 1).
	Count int64 `json:"count,omitempty"`
}

// MaxWatchDirs bounds the directories one watch covers; a recursive watch
// of a larger tree is refused (resource_exhausted), and directories made
// past the bound are reported as a dropped record and not entered.
const MaxWatchDirs = 4096
