package local

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
)

// File calls go to the sandbox's agent, which resolves every path in the
// sandbox's own root; the node never opens a sandbox path itself. What the
// agent answers is checked and translated into cove's errors by its client,
// once; the node passes those errors on as they are.

// Entry turns an entry of the agent into the API's.
func Entry(fi wire.FileInfo) api.FileEntry {
	return api.FileEntry{
		Name: fi.Name, Path: fi.Path, Type: api.FileType(fi.Type), Size: fi.Size,
		Mode: fmt.Sprintf("%04o", fi.Mode), MTime: time.Unix(0, fi.MTimeNS).UTC(),
		Version: fi.Version, UID: fi.UID, GID: fi.GID, Target: fi.Target,
	}
}

func (n *Node) agentOf(sandboxID string) (*client.Client, error) {
	s, err := n.get(sandboxID)
	if err != nil {
		return nil, err
	}
	return s.client, nil
}

// StatFile describes one file of a sandbox.
func (n *Node) StatFile(ctx context.Context, sandboxID, path string) (api.FileEntry, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	fi, err := c.StatFile(ctx, path)
	if err != nil {
		return api.FileEntry{}, err
	}
	return Entry(fi), nil
}

// ListFiles returns a page of the entries under a directory and the cursor
// of the next page ("" at the end).
func (n *Node) ListFiles(ctx context.Context, sandboxID string, req client.ListRequest) ([]api.FileEntry, string, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return nil, "", err
	}
	l, err := c.ListFiles(ctx, req)
	if err != nil {
		return nil, "", err
	}
	out := make([]api.FileEntry, len(l.Items))
	for i, fi := range l.Items {
		out[i] = Entry(fi)
	}
	return out, l.Next, nil
}

// ReadFile opens a file's content; h carries Range and conditional headers.
func (n *Node) ReadFile(ctx context.Context, sandboxID, path string, h http.Header) (*client.FileContent, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return nil, err
	}
	fc, err := c.ReadFile(ctx, path, h)
	if err != nil {
		return nil, err
	}
	return fc, nil
}

// WriteFile replaces a file's content atomically with body.
func (n *Node) WriteFile(ctx context.Context, sandboxID string, req client.WriteRequest, body io.Reader) (api.FileEntry, bool, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, false, err
	}
	fi, created, err := c.WriteFile(ctx, req, body)
	if err != nil {
		return api.FileEntry{}, false, err
	}
	return Entry(fi), created, nil
}

// EditFile applies exact-once replacements to a file.
func (n *Node) EditFile(ctx context.Context, sandboxID string, req wire.EditRequest) (api.FileEntry, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	fi, err := c.EditFile(ctx, req)
	if err != nil {
		return api.FileEntry{}, err
	}
	return Entry(fi), nil
}

// Mkdir creates a directory and its missing parents.
func (n *Node) Mkdir(ctx context.Context, sandboxID string, req wire.MkdirRequest) (api.FileEntry, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	fi, err := c.Mkdir(ctx, req)
	if err != nil {
		return api.FileEntry{}, err
	}
	return Entry(fi), nil
}

// MoveFile renames a file or directory.
func (n *Node) MoveFile(ctx context.Context, sandboxID string, req wire.MoveRequest) (api.FileEntry, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	fi, err := c.MoveFile(ctx, req)
	if err != nil {
		return api.FileEntry{}, err
	}
	return Entry(fi), nil
}

// RemoveFile removes a file or, with recursive, a directory tree.
func (n *Node) RemoveFile(ctx context.Context, sandboxID, path string, recursive bool) error {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return err
	}
	return c.RemoveFile(ctx, path, recursive)
}

// ReadArchive opens a folder as a tar.gz stream.
func (n *Node) ReadArchive(ctx context.Context, sandboxID, path string) (io.ReadCloser, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return nil, err
	}
	rc, err := c.ReadArchive(ctx, path)
	if err != nil {
		return nil, err
	}
	return rc, nil
}

// WriteArchive extracts a tar or tar.gz into a folder.
func (n *Node) WriteArchive(ctx context.Context, sandboxID, path string, uid, gid int, body io.Reader) (wire.ArchiveResult, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return wire.ArchiveResult{}, err
	}
	res, err := c.WriteArchive(ctx, path, uid, gid, body)
	if err != nil {
		return wire.ArchiveResult{}, err
	}
	return res, nil
}
