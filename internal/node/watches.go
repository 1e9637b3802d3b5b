package node

import (
	"context"

	"github.com/cove-dev/cove/api"
)

// WatchSpec asks for a file watch: the directory Path (clean, absolute),
// everything below it with Recursive, the events after After (0: from
// now on).
type WatchSpec struct {
	Path      string
	Recursive bool
	After     int64
}

// FileWatch is one reader of a watch's journal. Next returns its next
// record, waiting for one until ctx ends (the reader stays usable);
// io.EOF once the watch ended (its sandbox stopped, its directory went).
// Close lets the journal go (after its keep time).
type FileWatch interface {
	Next(ctx context.Context) (api.FileEvent, error)
	Close()
}

// Watches are a node's file watches (internal/node/watch keeps their
// journals; the fleet's router and node API carry them).
type Watches interface {
	// WatchFiles returns a reader of the journal of a directory's events,
	// once the sandbox's agent watches it.
	WatchFiles(ctx context.Context, sandboxID string, spec WatchSpec) (FileWatch, error)
}
