package local

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/node"
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
		Version: fi.Version, UID: fi.UID, GID: fi.GID, Target: fi.Target, Xattrs: fi.Xattrs,
	}
}

// nothingWritten is what a file call that found the node's data disk
// full did not do (noRoom): the agent leaves the old content.
const nothingWritten = "nothing was written"

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
func (n *Node) ListFiles(ctx context.Context, sandboxID string, spec node.ListSpec) (api.List[api.FileEntry], error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.List[api.FileEntry]{}, err
	}
	l, err := c.ListFiles(ctx, client.ListRequest{Path: spec.Path, Depth: spec.Depth, Limit: spec.Limit, After: spec.After})
	if err != nil {
		return api.List[api.FileEntry]{}, err
	}
	out := api.List[api.FileEntry]{Items: make([]api.FileEntry, len(l.Items)), NextCursor: l.Next}
	for i, fi := range l.Items {
		out.Items[i] = Entry(fi)
	}
	return out, nil
}

// ReadFile opens a file's content, or the range and under the conditions
// the spec names.
func (n *Node) ReadFile(ctx context.Context, sandboxID string, spec node.ReadSpec) (*node.Content, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	set := func(k string, vs ...string) {
		for _, v := range vs {
			if v != "" {
				h.Add(k, v)
			}
		}
	}
	set("Range", spec.Range)
	set("If-Range", spec.IfRange)
	set("If-Match", spec.IfMatch...)
	set("If-None-Match", spec.IfNoneMatch...)
	set("If-Modified-Since", spec.IfModifiedSince)
	set("If-Unmodified-Since", spec.IfUnmodifiedSince)
	fc, err := c.ReadFile(ctx, spec.Path, h)
	if err != nil {
		return nil, err
	}
	out := &node.Content{
		Status: fc.Status, ContentLength: -1, Body: fc.Body,
		ContentRange: fc.Header.Get("Content-Range"), ContentType: fc.Header.Get("Content-Type"),
		ETag: fc.Header.Get("ETag"), ReprDigest: fc.Header.Get("Repr-Digest"),
		LastModified: fc.Header.Get("Last-Modified"),
	}
	if v := fc.Header.Get("Content-Length"); v != "" {
		if out.ContentLength, err = strconv.ParseInt(v, 10, 64); err != nil || out.ContentLength < 0 {
			fc.Body.Close()
			return nil, fmt.Errorf("read %s: bad Content-Length %q from agent", spec.Path, v)
		}
	}
	return out, nil
}

// WriteFile replaces a file's content atomically with body.
func (n *Node) WriteFile(ctx context.Context, sandboxID string, spec node.WriteSpec, body io.Reader) (api.FileEntry, bool, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, false, err
	}
	if err := n.roomToWrite(); err != nil {
		return api.FileEntry{}, false, err
	}
	fi, created, err := c.WriteFile(ctx, client.WriteRequest{
		Path: spec.Path, UID: spec.UID, GID: spec.GID, Chown: spec.Chown, Mode: spec.Mode,
		IfMatch: spec.IfMatch, IfNoneMatch: spec.IfNoneMatch, SHA256: spec.SHA256,
		TrailerSHA256: spec.Trailer, Size: spec.Size, Xattrs: spec.Xattrs,
	}, body)
	if err != nil {
		return api.FileEntry{}, false, n.noRoom(err, nothingWritten)
	}
	return Entry(fi), created, nil
}

// EditFile applies exact-once replacements to a file.
func (n *Node) EditFile(ctx context.Context, sandboxID string, spec node.EditSpec) (api.FileEntry, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	if err := n.roomToWrite(); err != nil {
		return api.FileEntry{}, err
	}
	edits := make([]wire.FileEdit, len(spec.Edits))
	for i, e := range spec.Edits {
		edits[i] = wire.FileEdit{Old: e.Old, New: e.New}
	}
	fi, err := c.EditFile(ctx, wire.EditRequest{Path: spec.Path, IfMatch: spec.IfMatch, Edits: edits})
	if err != nil {
		return api.FileEntry{}, n.noRoom(err, nothingWritten)
	}
	return Entry(fi), nil
}

// Mkdir creates a directory and its missing parents.
func (n *Node) Mkdir(ctx context.Context, sandboxID string, spec node.MkdirSpec) (api.FileEntry, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	if err := n.roomToWrite(); err != nil {
		return api.FileEntry{}, err
	}
	fi, err := c.Mkdir(ctx, wire.MkdirRequest{Path: spec.Path, UID: spec.UID, GID: spec.GID})
	if err != nil {
		return api.FileEntry{}, n.noRoom(err, nothingWritten)
	}
	return Entry(fi), nil
}

// MoveFile renames a file or directory.
func (n *Node) MoveFile(ctx context.Context, sandboxID string, spec node.MoveSpec) (api.FileEntry, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.FileEntry{}, err
	}
	if err := n.roomToWrite(); err != nil {
		return api.FileEntry{}, err
	}
	fi, err := c.MoveFile(ctx, wire.MoveRequest{From: spec.From, To: spec.To, Overwrite: spec.Overwrite, UID: spec.UID, GID: spec.GID})
	if err != nil {
		return api.FileEntry{}, n.noRoom(err, nothingWritten)
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
func (n *Node) WriteArchive(ctx context.Context, sandboxID string, spec node.ArchiveSpec, body io.Reader) (api.ArchiveResult, error) {
	c, err := n.agentOf(sandboxID)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	if err := n.roomToWrite(); err != nil {
		return api.ArchiveResult{}, err
	}
	res, err := c.WriteArchive(ctx, spec.Path, spec.UID, spec.GID, body)
	if err != nil {
		return api.ArchiveResult{}, n.noRoom(err, nothingWritten)
	}
	return api.ArchiveResult{Path: spec.Path, Entries: res.Entries, Bytes: res.Bytes}, nil
}
