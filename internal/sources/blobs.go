// Package sources keeps what sandboxes start from beside the control
// plane: assets' bytes, content-addressed on the node's disk, and the
// checks an archive passes before it is kept.
package sources

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/expansion"
)

// Blobs keeps assets' bytes in a directory: <dir>/<team>/<sha256>, each
// team apart (one team's bytes are never another's, even when equal), the
// directories 0700 and the files 0600, written to a temporary name and
// renamed once complete, so a blob that exists is whole.
type Blobs struct {
	dir string
}

// NewBlobs makes the directory if it is missing.
func NewBlobs(dir string) (*Blobs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	return &Blobs{dir: dir}, nil
}

var (
	teamRE = regexp.MustCompile(`^team_[a-z0-9]+$`)
	sumRE  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func (b *Blobs) path(teamID, sum string) (string, error) {
	if !teamRE.MatchString(teamID) || !sumRE.MatchString(sum) {
		return "", fmt.Errorf("blob %q of team %q: invalid name", sum, teamID)
	}
	return filepath.Join(b.dir, teamID, sum), nil
}

// Put stores r's bytes for the team, at most max of them (413 past it),
// and returns their sha-256 and size. Bytes the team stored before are
// kept once. want, when not empty, is the digest the bytes must have
// (422 otherwise); nothing is kept on any failure.
func (b *Blobs) Put(ctx context.Context, teamID string, r io.Reader, max int64, want string) (sum string, size int64, err error) {
	if !teamRE.MatchString(teamID) {
		return "", 0, fmt.Errorf("team %q: invalid name", teamID)
	}
	dir := filepath.Join(b.dir, teamID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", 0, err
	}
	f, err := os.CreateTemp(dir, ".part-*")
	if err != nil {
		return "", 0, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	size, err = io.CopyBuffer(io.MultiWriter(f, h), io.LimitReader(ctxReader{ctx, r}, max+1), make([]byte, 256<<10))
	if err != nil {
		return "", 0, fmt.Errorf("read the archive: %w", err)
	}
	if size > max {
		return "", 0, &api.Error{Code: api.CodePayloadTooLarge,
			Message: fmt.Sprintf("the archive is larger than %d bytes, the most an asset may be; nothing was kept", max),
			Details: map[string]any{"max_bytes": max}}
	}
	sum = hex.EncodeToString(h.Sum(nil))
	if want != "" && want != sum {
		return "", 0, &api.Error{Code: api.CodeUnprocessable,
			Message: fmt.Sprintf("the archive's sha-256 is %s but the request's digest says %s; nothing was kept", sum, want)}
	}
	if err = f.Sync(); err != nil {
		return "", 0, err
	}
	if _, err = f.Seek(0, io.SeekStart); err != nil {
		return "", 0, err
	}
	if err = CheckArchive(f); err != nil {
		return "", 0, err
	}
	if err = f.Close(); err != nil {
		return "", 0, err
	}
	if err = os.Rename(f.Name(), filepath.Join(dir, sum)); err != nil {
		return "", 0, err
	}
	return sum, size, nil
}

// Open opens a blob for reading; the reader fails at its end (instead of
// io.EOF) when the bytes are no longer those of sum, so that a damaged
// blob is never passed off as whole.
func (b *Blobs) Open(ctx context.Context, teamID, sum string) (io.ReadCloser, error) {
	p, err := b.path(teamID, sum)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, api.Errorf(api.CodeNotFound, "the bytes of asset %s are missing on this node", sum)
	}
	if err != nil {
		return nil, err
	}
	return &verified{f: f, h: sha256.New(), want: sum}, nil
}

// Remove deletes a blob; a missing one is no error.
func (b *Blobs) Remove(ctx context.Context, teamID, sum string) error {
	p, err := b.path(teamID, sum)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

type verified struct {
	f    *os.File
	h    hash.Hash
	want string
}

func (v *verified) Read(p []byte) (int, error) {
	n, err := v.f.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
			return n, fmt.Errorf("asset bytes on disk have sha-256 %s, not %s: the stored copy is damaged", got, v.want)
		}
	}
	return n, err
}

func (v *verified) Close() error { return v.f.Close() }

// CheckArchive reads a tar or tar.gz to its end and refuses it (400) when
// it is not one, or when an entry would leave the folder it is extracted
// into: an absolute name, `..`, a symlink leading out. The agent checks
// again when it extracts; this keeps bad archives out of the store.
//
// A gzipped archive that expands more than expansion.Ratio times (past
// expansion.Floor) is refused as a decompression bomb (413).
func CheckArchive(r io.Reader) error {
	compressed := &expansion.Counter{R: r}
	br := bufio.NewReaderSize(compressed, 64<<10)
	var in io.Reader = br
	var bomb *expansion.Reader
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return api.Errorf(api.CodeInvalidArgument, "the archive is not valid gzip: %v; nothing was kept", err)
		}
		bomb = expansion.NewReader(zr, func() int64 { return compressed.N }, "the archive")
		in = bomb
	}
	tr := tar.NewReader(in)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if bomb != nil && bomb.Err() != nil {
			return bomb.Err()
		}
		if err != nil {
			return api.Errorf(api.CodeInvalidArgument, "the archive is not a valid tar (or gzipped tar): %v; nothing was kept", err)
		}
		if err := checkEntry(hdr); err != nil {
			return err
		}
	}
	if _, err := io.Copy(io.Discard, in); err != nil {
		if bomb != nil && bomb.Err() != nil {
			return bomb.Err()
		}
		return api.Errorf(api.CodeInvalidArgument, "the archive was cut short: %v; nothing was kept", err)
	}
	return nil
}

// CheckExpansion reads an archive to its end and refuses it (413) when it
// is gzip that expands more than expansion.Ratio times (past
// expansion.Floor); the rest of it is the extractor's to check.
func CheckExpansion(r io.Reader) error {
	compressed := &expansion.Counter{R: r}
	br := bufio.NewReaderSize(compressed, 64<<10)
	if magic, _ := br.Peek(2); len(magic) < 2 || magic[0] != 0x1f || magic[1] != 0x8b {
		return nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return api.Errorf(api.CodeInvalidArgument, "the archive is not valid gzip: %v; nothing was kept", err)
	}
	bomb := expansion.NewReader(zr, func() int64 { return compressed.N }, "the archive")
	if _, err := io.Copy(io.Discard, bomb); err != nil {
		if bomb.Err() != nil {
			return bomb.Err()
		}
		return api.Errorf(api.CodeInvalidArgument, "the archive is not valid gzip: %v; nothing was kept", err)
	}
	return nil
}

func checkEntry(hdr *tar.Header) error {
	refuse := func(why string) error {
		return api.Errorf(api.CodeInvalidArgument, "archive entry %q %s; nothing was kept", hdr.Name, why)
	}
	name := hdr.Name
	switch {
	case strings.IndexByte(name, 0) >= 0:
		return refuse("contains a NUL byte")
	case strings.HasPrefix(name, "/"):
		return refuse("is an absolute path, which would leave the folder")
	case slicesContains(strings.Split(name, "/"), ".."):
		return refuse("contains .., which would leave the folder")
	}
	if hdr.Typeflag == tar.TypeSymlink || hdr.Typeflag == tar.TypeLink {
		if path.IsAbs(hdr.Linkname) {
			return refuse("links to an absolute path, outside the folder")
		}
		target := hdr.Linkname
		if hdr.Typeflag == tar.TypeSymlink {
			target = path.Join(path.Dir(path.Clean(name)), hdr.Linkname)
		}
		if !fs.ValidPath(path.Clean(target)) {
			return refuse("links outside the folder")
		}
	}
	return nil
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// ctxReader stops a copy once its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
