package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent"
)

// File calls go to the sandbox's agent, which resolves every path in the
// sandbox's own root; the node never opens a sandbox path itself. What the
// agent answers is checked by its client and translated here, once.

// Entry turns an entry of the agent into the API's.
func Entry(fi agent.FileInfo) api.FileEntry {
	return api.FileEntry{
		Name: fi.Name, Path: fi.Path, Type: api.FileType(fi.Type), Size: fi.Size,
		Mode: fmt.Sprintf("%04o", fi.Mode), MTime: time.Unix(0, fi.MTimeNS).UTC(),
		Version: fi.Version, UID: fi.UID, GID: fi.GID, Target: fi.Target,
	}
}

// fileError is agentError with the codes only file calls use.
func fileError(err error) error {
	var ae *agent.Error
	if errors.As(err, &ae) && ae.Code == agent.CodeInsufficientStorage {
		return &api.Error{Code: api.CodeInsufficientStorage, Message: ae.Message}
	}
	return agentError(err)
}

func (n *Node) agentOf(sandboxID string) (*agent.Client, error) {
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
		return api.FileEntry{}, fileError(err)
	}
	return Entry(fi), nil
}

// ListFiles returns a page of the entries under a directory and the cursor
// of the next page ("" at the end).
func (n *Node) ListFiles(ctx context.Context, sandboxID string, req agent.ListRequest) ([]api.FileEntry, string, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return nil, "", err
	}
	l, err := c.ListFiles(ctx, req)
	if err != nil {
		return nil, "", fileError(err)
	}
	out := make([]api.FileEntry, len(l.Items))
	for i, fi := range l.Items {
		out[i] = Entry(fi)
	}
	return out, l.Next, nil
}

// ReadFile opens a file's content; h carries Range and conditional headers.
func (n *Node) ReadFile(ctx context.Context, sandboxID, path string, h http.Header) (*agent.FileContent, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return nil, err
	}
	fc, err := c.ReadFile(ctx, path, h)
	if err != nil {
		return nil, fileError(err)
	}
	return fc, nil
}

// WriteFile replaces a file's content atomically with body.
func (n *Node) WriteFile(ctx context.Context, sandboxID string, req agent.WriteRequest, body io.Reader) (api.FileEntry, bool, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, false, err
	}
	fi, created, err := c.WriteFile(ctx, req, body)
	if err != nil {
		return api.FileEntry{}, false, bodyError(err)
	}
	return Entry(fi), created, nil
}

// bodyError keeps an *api.Error raised while the request body was read
// (the caller's own check failed) and translates the rest.
func bodyError(err error) error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae
	}
	return fileError(err)
}

// EditFile applies exact-once replacements to a file.
func (n *Node) EditFile(ctx context.Context, sandboxID string, req agent.EditRequest) (api.FileEntry, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	fi, err := c.EditFile(ctx, req)
	if err != nil {
		return api.FileEntry{}, fileError(err)
	}
	return Entry(fi), nil
}

// Mkdir creates a directory and its missing parents.
func (n *Node) Mkdir(ctx context.Context, sandboxID string, req agent.MkdirRequest) (api.FileEntry, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	fi, err := c.Mkdir(ctx, req)
	if err != nil {
		return api.FileEntry{}, fileError(err)
	}
	return Entry(fi), nil
}

// MoveFile renames a file or directory.
func (n *Node) MoveFile(ctx context.Context, sandboxID string, req agent.MoveRequest) (api.FileEntry, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	fi, err := c.MoveFile(ctx, req)
	if err != nil {
		return api.FileEntry{}, fileError(err)
	}
	return Entry(fi), nil
}

// RemoveFile removes a file or, with recursive, a directory tree.
func (n *Node) RemoveFile(ctx context.Context, sandboxID, path string, recursive bool) error {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return err
	}
	return fileError(c.RemoveFile(ctx, path, recursive))
}

// ReadArchive opens a folder as a tar.gz stream.
func (n *Node) ReadArchive(ctx context.Context, sandboxID, path string) (io.ReadCloser, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return nil, err
	}
	rc, err := c.ReadArchive(ctx, path)
	if err != nil {
		return nil, fileError(err)
	}
	return rc, nil
}

// WriteArchive extracts a tar or tar.gz into a folder.
func (n *Node) WriteArchive(ctx context.Context, sandboxID, path string, uid, gid int, body io.Reader) (agent.ArchiveResult, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return agent.ArchiveResult{}, err
	}
	res, err := c.WriteArchive(ctx, path, uid, gid, body)
	if err != nil {
		return agent.ArchiveResult{}, bodyError(err)
	}
	return res, nil
}
