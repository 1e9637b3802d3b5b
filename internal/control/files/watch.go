package files

import (
	"context"

	"github.com/cove-dev/cove/internal/node"
)

// WatchQuery asks for a file watch: the directory Path, everything below
// it with Recursive, the records after After (0: from now on).
type WatchQuery struct {
	Path      string
	Recursive bool
	After     int64
}

// WatchFiles starts reading a watch of a directory of a live sandbox (woken
// unless told not to); it returns once the sandbox's agent watches it.
func (s *Service) WatchFiles(ctx context.Context, t Target, q WatchQuery) (node.FileWatch, error) {
	if q.After < 0 {
		return nil, invalid("after must be a sequence number (0 or more)")
	}
	sb, p, err := s.Live(ctx, t, "path", q.Path)
	if err != nil {
		return nil, err
	}
	return s.node.WatchFiles(ctx, sb.ID, node.WatchSpec{Path: p, Recursive: q.Recursive, After: q.After})
}
