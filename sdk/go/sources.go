package cove

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/cove-dev/cove/api"
)

// IgnoreFile is the file at the top of a folder whose patterns are left
// out of the folder's upload, one per line (see Excluder).
const IgnoreFile = ".coveignore"

// Excluder decides which paths of a folder an upload leaves out, by
// patterns like .gitignore's: a pattern without a slash matches a name at
// any depth (`*.pyc`, `node_modules`); one with a slash matches the path
// from the top of the folder (`build/out`, `/dist`); a trailing slash
// matches directories only (`cache/`); `**/` at the start matches at any
// depth. `*`, `?` and `[…]` are path.Match's. Lines starting with `#` and
// empty lines are skipped. An excluded directory is left out whole.
type Excluder struct {
	patterns []pattern
}

type pattern struct {
	glob     string
	anchored bool // matched against the whole relative path
	dirOnly  bool
}

// NewExcluder parses patterns; an invalid one is an error.
func NewExcluder(patterns []string) (*Excluder, error) {
	e := &Excluder{}
	for _, p := range patterns {
		if err := e.add(p); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *Excluder) add(line string) error {
	p := strings.TrimSpace(line)
	if p == "" || strings.HasPrefix(p, "#") {
		return nil
	}
	if strings.HasPrefix(p, "!") {
		return fmt.Errorf("exclude pattern %q: negation (!) is not supported", line)
	}
	var pt pattern
	if strings.HasSuffix(p, "/") {
		pt.dirOnly = true
		p = strings.TrimRight(p, "/")
	}
	p = strings.TrimPrefix(p, "**/")
	if strings.Contains(p, "/") {
		pt.anchored = true
		p = strings.TrimPrefix(p, "/")
	}
	if p == "" {
		return fmt.Errorf("exclude pattern %q matches nothing", line)
	}
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("exclude pattern %q: %v", line, err)
	}
	pt.glob = p
	e.patterns = append(e.patterns, pt)
	return nil
}

// AddFile adds the patterns of an ignore file; a missing file adds none.
func (e *Excluder) AddFile(name string) error {
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if err := e.add(sc.Text()); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return sc.Err()
}

// Excluded reports whether rel (slash-separated, relative to the folder)
// is left out.
func (e *Excluder) Excluded(rel string, dir bool) bool {
	if e == nil {
		return false
	}
	base := path.Base(rel)
	for _, p := range e.patterns {
		if p.dirOnly && !dir {
			continue
		}
		target := base
		if p.anchored {
			target = rel
		}
		if ok, _ := path.Match(p.glob, target); ok {
			return true
		}
	}
	return false
}

// WriteDirArchive writes the folder dir as a tar.gz to w: regular files
// (with their permission bits), directories (empty ones too) and
// symlinks, named relative to dir, owners left out. Paths ex excludes
// are left out; other file types (sockets, devices, FIFOs) are skipped.
//
// cove's own commands pack with internal/archive, of which this (with
// Excluder) is the SDK's copy for its users; a test there keeps the two
// byte for byte alike.
func WriteDirArchive(w io.Writer, dir string, ex *Excluder) error {
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	buf := make([]byte, 256<<10)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
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
	h := sha256.New()
	body := &digestBody{r: io.TeeReader(r, h), h: h}
	req, err := c.newRequest(ctx, http.MethodPut, filesPath(ref, "archive"), nil, body)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	body.req = req
	req.Header.Set("Content-Type", "application/gzip")
	req.Trailer = http.Header{"Repr-Digest": nil}
	req.ContentLength = -1
	resp, err := c.doRequest(req)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	var res api.ArchiveResult
	return res, decodeJSON(resp, &res)
}

// DirSource says how CreateSandboxFromDir sends a folder.
type DirSource struct {
	// Exclude patterns (Excluder); the folder's .coveignore adds its own.
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
	if err := ex.AddFile(filepath.Join(dir, IgnoreFile)); err != nil {
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
