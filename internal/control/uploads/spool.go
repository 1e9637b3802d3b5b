package uploads

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/cove-dev/cove/api"
)

// Spooled is an upload received whole into a private temporary file.
type Spooled struct {
	// File is read from its start.
	File   *os.File
	Size   int64
	SHA256 string // hex
}

// Close removes the file.
func (sp *Spooled) Close() error {
	sp.File.Close()
	return os.Remove(sp.File.Name())
}

// Spool receives r into a private temporary file of the upload dir,
// counted by u, at most max bytes (413 past it), hashed and checked
// against want or the trailer's digest (422). what names the upload in
// errors ("image archive"). Nothing is left on failure.
func (l *Ledger) Spool(ctx context.Context, u *Upload, r io.Reader, max int64, want string, trailer func() (string, error), what string) (_ *Spooled, err error) {
	f, err := os.CreateTemp(l.cfg.Dir, ".upload-*")
	if err != nil {
		return nil, fmt.Errorf("spool %s for team %s: %w", what, u.teamID, err)
	}
	sp := &Spooled{File: f}
	defer func() {
		if err != nil {
			sp.Close()
		}
	}()
	cr := NewCheckedReader(io.LimitReader(u.Reader(ctx, r), max+1), math.MaxInt64, want, trailer)
	sp.Size, err = io.CopyBuffer(f, cr, make([]byte, 256<<10))
	if sp.Size > max {
		return nil, &api.Error{Code: api.CodePayloadTooLarge,
			Message: fmt.Sprintf("the %s is larger than %d bytes, the most this server takes; nothing was kept", what, max),
			Details: map[string]any{"max_bytes": max}}
	}
	if cr.Err() != nil {
		return nil, cr.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("receive %s for team %s: %w", what, u.teamID, err)
	}
	sp.SHA256 = cr.Sum()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return sp, nil
}
