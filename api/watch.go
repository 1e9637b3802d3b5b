package api

// FileEventType is the kind of a file watch's event.
type FileEventType string

// Event types of a file watch (GET /v1/sandboxes/{ref}/files/watch).
const (
	// FileCreate: a file, directory or symlink appeared, by creation or
	// by being moved in (under its new name).
	FileCreate FileEventType = "create"
	// FileWrite: a file's content was written.
	FileWrite FileEventType = "write"
	// FileRemove: an entry was removed.
	FileRemove FileEventType = "remove"
	// FileRename: an entry was moved away from Path (its new name, when
	// it is under the watch, comes as a create).
	FileRename FileEventType = "rename"
	// FileChmod: an entry's mode, owner, times or extended attributes
	// changed.
	FileChmod FileEventType = "chmod"
	// FileDropped: Count events are not reported: they came faster than
	// the watch's rate, they were past the journal's bound when the
	// reader resumed, or the kernel's queue overflowed. Count 0 means an
	// unknown number: the journal the reader resumed from is gone. A
	// reader that must be exact lists the directory again.
	FileDropped FileEventType = "dropped"
)

// FileEvent is one record of a file watch. Seq increases along the
// watch's journal; a reader resumes with after=Seq. Entry is the entry as
// a listing gives it, when it still exists (not for remove and rename).
type FileEvent struct {
	Seq   int64         `json:"seq"`
	Type  FileEventType `json:"type"`
	Path  string        `json:"path,omitempty"`
	Entry *FileEntry    `json:"entry,omitempty"`
	Count int64         `json:"count,omitempty"`
}

// Values lists the event types: the enum of the OpenAPI document.
func (FileEventType) Values() []string {
	return []string{string(FileCreate), string(FileWrite), string(FileRemove), string(FileRename), string(FileChmod), string(FileDropped)}
}
