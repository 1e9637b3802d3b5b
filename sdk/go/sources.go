package cove

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"

	"github.com/cove-dev/cove/api"
)

// IgnoreFile names the files of a folder whose patterns are left out of
// the folder's upload: the one at its top and any in its subfolders, as
// .gitignore files are (see Excluder).
const IgnoreFile = ".coveignore"

// Excluder decides which paths of a folder an upload leaves out. Its
// patterns follow .gitignore exactly (matched by go-git's gitignore
// package): a pattern without a slash but at its end matches a name at any
// depth (`*.pyc`); one with a slash at its start or middle is anchored to
// the folder of the file it is in (`/dist`, `build/out`); a trailing slash
// matches directories only (`cache/`); `**` matches any number of
// directories; `!` re-includes what an earlier pattern excluded, except
// inside an excluded directory, which is left out whole; `#` starts a
// comment and `\` escapes. A .coveignore in a subfolder applies below
// it, after the ones above. .coveignore files themselves are always
// uploaded. A nil Excluder excludes nothing.
type Excluder struct {
	patterns []gitignore.Pattern
}

// NewExcluder returns an Excluder with patterns, as if they were the
// first lines of the folder's top .coveignore. WriteDirArchive adds the
// folder's .coveignore files as it meets them. A pattern whose brackets
// do not close is an error.
func NewExcluder(patterns []string) (*Excluder, error) {
	e := &Excluder{}
	if err := e.add(patterns, nil); err != nil {
		return nil, err
	}
	return e, nil
}

// add parses the lines of an ignore file in the folder domain (its path
// from the top, split at slashes).
func (e *Excluder) add(lines []string, domain []string) error {
	for _, line := range lines {
		line = strings.TrimSuffix(line, "\r")
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		for _, seg := range strings.Split(strings.TrimPrefix(line, "!"), "/") {
			if _, err := path.Match(seg, ""); err != nil {
				return fmt.Errorf("exclude pattern %q: %v", line, err)
			}
		}
		e.patterns = append(e.patterns, gitignore.ParsePattern(line, domain))
	}
	return nil
}

// AddFile adds the patterns of an ignore file as if it were at the top of
// the folder; a missing file adds none.
func (e *Excluder) AddFile(name string) error { return e.addFile(name, nil) }

func (e *Excluder) addFile(name string, domain []string) error {
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := e.add(strings.Split(string(b), "\n"), domain); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Excluded reports whether rel (slash-separated, relative to the folder)
// is left out, by the patterns added so far. It does not look at rel's
// parents: a walk skips an excluded directory whole.
func (e *Excluder) Excluded(rel string, dir bool) bool {
	if e == nil || !dir && path.Base(rel) == IgnoreFile {
		return false
	}
	return gitignore.NewMatcher(e.patterns).Match(strings.Split(rel, "/"), dir)
}

// withFolder returns a copy of e that goes on to read the .coveignore
// files of the folder it walks; nil stays nil.
func (e *Excluder) withFolder() *Excluder {
	if e == nil {
		return nil
	}
	return &Excluder{patterns: slices.Clip(slices.Clone(e.patterns))}
}

// enter adds the .coveignore of the folder dir at rel ("" for the top).
func (e *Excluder) enter(dir, rel string) error {
	if e == nil {
		return nil
	}
	var domain []string
	if rel != "" {
		domain = strings.Split(rel, "/")
	}
	return e.addFile(filepath.Join(dir, IgnoreFile), domain)
}

// WriteDirArchive writes the folder dir as a tar.gz to w: regular files
// (with their permission bits), directories (empty ones too) and
// symlinks, named relative to dir, owners left out. Paths ex excludes
// are left out, ex reading the folder's .coveignore files (the top one
// and those below) as the walk enters each folder; a nil ex leaves out
// nothing. Other file types (sockets, devices, FIFOs) are skipped.
//
// cove's own commands pack with internal/archive, of which this (with
// Excluder) is the SDK's copy for its users; a test there keeps the two
// byte for byte alike.
func WriteDirArchive(w io.Writer, dir string, ex *Excluder) error {
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	buf := make([]byte, 256<<10)
	ex = ex.withFolder()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return ex.enter(p, "")
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ex.Excluded(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if err := ex.enter(p, rel); err != nil {
				return err
			}
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.CopyBuffer(tw, io.LimitReader(f, hdr.Size), buf)
		if err == nil && n != hdr.Size {
			err = fmt.Errorf("%s changed size while it was read", p)
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// UploadSource sends the source archive (tar or tar.gz) of a sandbox
// created with source type upload; it lands in the sandbox's workdir, as
// user, and the sandbox goes on to its setup, then running. The SDK sends
// the archive's sha-256 as a trailer: an archive changed on the way
// extracts nothing. A refused archive leaves the sandbox waiting for
// another.
func (c *Client) UploadSource(ctx context.Context, ref string, r io.Reader) (api.ArchiveResult, error) {
	req, err := c.newRequest(ctx, http.MethodPut, filesPath(ref, "archive"), nil, nil)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	setDigestBody(req, r)
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := c.doRequest(req)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	var res api.ArchiveResult
	return res, decodeJSON(resp, &res)
}

// DirSource says how CreateSandboxFromDir sends a folder.
type DirSource struct {
	// Exclude patterns (Excluder); the folder's .coveignore files add
	// their own.
	Exclude []string
	// Progress, when set, wraps the archive stream as it is sent (a
	// progress bar, say).
	Progress func(io.Reader) io.Reader
}

// CreateSandboxFromDir creates a sandbox with source upload and streams
// the folder dir into its workdir. It returns once the folder has landed;
// the sandbox then runs its setup, if any (wait for running). If the
// upload fails, the sandbox is deleted: nothing is left half-made.
func (c *Client) CreateSandboxFromDir(ctx context.Context, req api.CreateSandboxRequest, dir string, opts DirSource) (api.Sandbox, api.ArchiveResult, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return api.Sandbox{}, api.ArchiveResult{}, err
	}
	if !fi.IsDir() {
		return api.Sandbox{}, api.ArchiveResult{}, fmt.Errorf("%s is not a folder", dir)
	}
	ex, err := NewExcluder(opts.Exclude)
	if err != nil {
		return api.Sandbox{}, api.ArchiveResult{}, err
	}
	req.Source = &api.Source{Type: api.SourceUpload}
	sb, err := c.CreateSandbox(ctx, req, false)
	if err != nil {
		return sb, api.ArchiveResult{}, err
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(WriteDirArchive(pw, dir, ex))
	}()
	var r io.Reader = pr
	if opts.Progress != nil {
		r = opts.Progress(pr)
	}
	res, err := c.UploadSource(ctx, sb.ID, r)
	pr.CloseWithError(errors.New("upload ended"))
	<-done
	if err != nil {
		// Nothing half-made: the sandbox goes with its failed upload.
		if _, derr := c.TerminateSandbox(context.WithoutCancel(ctx), sb.ID); derr != nil {
			err = fmt.Errorf("%w (and deleting sandbox %s failed: %v)", err, sb.ID, derr)
		}
		return sb, res, err
	}
	return sb, res, nil
}
