package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cove-dev/cove/api"
)

// Uploads (images, assets, source uploads) are the one way a tenant writes
// to the data disk at the speed it chooses. So that no team can stall or
// starve another through them:
//
//   - each streams into a private temporary file of its own, and shared
//     locks are taken only to commit what has fully arrived;
//   - a team has at most MaxUploadsPerTeam open at once (429 past it);
//   - the bytes are counted while they arrive, not once before: against
//     the team's asset or image cap, and against the node's data disk
//     (a node that holds room for them, so that its disk admission counts
//     them as promised);
//   - the HTTP layer cuts a body that sends nothing for a while
//     (--upload-idle-timeout), which fails the upload like any other
//     error: its temporary file is removed.

// An upload reserves ahead of what it has written as much again as it
// wrote, from minChunk to maxChunk: a trickle holds little of its team's
// cap, a fast upload reads the store once per few megabytes.
const (
	minChunk = 64 << 10
	maxChunk = 4 << 20
)

// uploadRetryS is the Retry-After of an upload refused because the team
// has too many open.
const uploadRetryS = 5

// diskHolder is a node that counts bytes of its data disk besides its
// sandboxes' disks (internal/node/local): uploads not yet written. Its
// disk admission refuses sandboxes, and more holds, that no longer fit.
type diskHolder interface {
	// HoldDisk counts bytes for key, replacing what key held; a larger
	// hold that does not fit is refused with resource_exhausted. 0
	// forgets key.
	HoldDisk(key string, bytes int64) error
}

// uploadKind says which of the team's caps an upload's bytes count
// against.
type uploadKind int

const (
	uploadSource uploadKind = iota // no team cap: bounded by MaxSourceBytes
	uploadAsset
	uploadImage
)

// uploadLedger is the server's memory of open uploads, per team.
type uploadLedger struct {
	seq atomic.Int64

	mu    sync.Mutex
	teams map[string]*teamUploads
}

// teamUploads is one team's open uploads.
type teamUploads struct {
	// open is guarded by uploadLedger.mu.
	open int

	// mu orders the team's reservations: each reads the stored bytes and
	// the reserved ones together, and an upload's reservation is released
	// only after its bytes are stored.
	mu       sync.Mutex
	reserved [3]int64 // by uploadKind
}

// upload is one open upload: a slot of its team and the bytes it
// reserved.
type upload struct {
	s      *Server
	teamID string
	team   *teamUploads
	kind   uploadKind
	key    string // the node's name of its disk hold

	// reserved and written are used by one goroutine, the upload's.
	reserved, written int64
}

// beginUpload takes one of the team's upload slots, or answers 429 when
// they are all in use. The caller ends it.
func (s *Server) beginUpload(teamID string, kind uploadKind) (*upload, error) {
	l := &s.uploads
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.teams == nil {
		l.teams = map[string]*teamUploads{}
	}
	t := l.teams[teamID]
	if t == nil {
		t = &teamUploads{}
		l.teams[teamID] = t
	}
	if t.open >= s.cfg.MaxUploadsPerTeam {
		return nil, &api.Error{Code: api.CodeResourceExhausted,
			Message: fmt.Sprintf("the team has %d uploads open, the most it may have at once; send this one when one of them ends", t.open),
			Details: map[string]any{"limit": s.cfg.MaxUploadsPerTeam, "retry_after_s": uploadRetryS}}
	}
	t.open++
	return &upload{s: s, teamID: teamID, team: t, kind: kind, key: "upload-" + strconv.FormatInt(l.seq.Add(1), 10)}, nil
}

// end releases the upload's reservation and slot; call it once its bytes
// are stored (they then count as the team's) or removed.
func (u *upload) end() {
	u.team.mu.Lock()
	u.team.reserved[u.kind] -= u.reserved
	u.team.mu.Unlock()
	u.reserved = 0
	u.hold(0)
	l := &u.s.uploads
	l.mu.Lock()
	defer l.mu.Unlock()
	if u.team.open--; u.team.open == 0 {
		delete(l.teams, u.teamID)
	}
}

// hold asks the node to count bytes of its data disk for the upload.
func (u *upload) hold(bytes int64) error {
	if h, ok := u.s.node.(diskHolder); ok {
		return h.HoldDisk(u.key, bytes)
	}
	return nil
}

// reader counts r's bytes as they arrive: each read past what the upload
// reserved reserves more, or fails.
func (u *upload) reader(ctx context.Context, r io.Reader) io.Reader {
	return &countedReader{ctx: ctx, u: u, r: r}
}

type countedReader struct {
	ctx context.Context
	u   *upload
	r   io.Reader
	err error
}

func (c *countedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.r.Read(p)
	if n > 0 {
		if rerr := c.u.grow(c.ctx, int64(n)); rerr != nil {
			c.err = rerr
			return 0, rerr
		}
	}
	return n, err
}

// grow accounts for n more bytes, reserving another chunk when they do
// not fit in the reservation: against the team's cap of the upload's kind
// and the node's data disk. The disk hold is what is reserved but not
// written yet: written bytes are already gone from the disk's free space.
func (u *upload) grow(ctx context.Context, n int64) error {
	need := u.written + n
	if need > u.reserved {
		if err := u.reserve(ctx, need); err != nil {
			return err
		}
	}
	u.written = need
	return u.hold(u.reserved - u.written)
}

func (u *upload) reserve(ctx context.Context, need int64) error {
	t := u.team
	t.mu.Lock()
	defer t.mu.Unlock()
	want := need + min(max(u.written, minChunk), maxChunk)
	if limit := u.s.teamCap(u.kind); limit > 0 {
		used, err := u.s.teamStored(ctx, u.teamID, u.kind)
		if err != nil {
			return err
		}
		room := limit - used - (t.reserved[u.kind] - u.reserved)
		if need > room {
			return u.s.teamCapFull(u.kind, used+t.reserved[u.kind]-u.reserved, limit)
		}
		want = min(want, room)
	}
	if err := u.hold(want - u.written); err != nil {
		// Less than a chunk may still fit: the bytes at hand.
		if want == need {
			return fmt.Errorf("upload for team %s: %w", u.teamID, err)
		}
		want = need
		if err := u.hold(want - u.written); err != nil {
			return fmt.Errorf("upload for team %s: %w", u.teamID, err)
		}
	}
	t.reserved[u.kind] += want - u.reserved
	u.reserved = want
	return nil
}

func (s *Server) teamCap(k uploadKind) int64 {
	switch k {
	case uploadAsset:
		return s.cfg.MaxTeamAssetBytes
	case uploadImage:
		return s.cfg.MaxImageBytesPerTeam
	}
	return 0
}

// teamStored is what the team keeps of a kind: its assets' bytes, its
// images' trees.
func (s *Server) teamStored(ctx context.Context, teamID string, k uploadKind) (int64, error) {
	switch k {
	case uploadAsset:
		return s.store.AssetBytes(ctx, teamID)
	case uploadImage:
		return s.teamImageBytes(ctx, teamID)
	}
	return 0, nil
}

func (s *Server) teamCapFull(k uploadKind, used, limit int64) error {
	if k == uploadAsset {
		return s.storageFull(used)
	}
	return &api.Error{
		Code: api.CodeInsufficientStorage,
		Message: fmt.Sprintf("the team's images and image uploads use %d of its %d bytes; delete images (DELETE /v1/images/{id}) to make room; nothing was kept",
			used, limit),
		Details: map[string]any{"used_bytes": used, "limit_bytes": limit},
	}
}

// spooled is an upload received whole into a private temporary file.
type spooled struct {
	f    *os.File
	size int64
	sum  string // sha-256, hex
}

// Close removes the file.
func (sp *spooled) Close() error {
	sp.f.Close()
	return os.Remove(sp.f.Name())
}

// spool receives r into a private temporary file of the upload dir,
// counted by u, at most max bytes (413 past it), hashed and checked
// against want or the trailer's digest (422). The file is read from its
// start; nothing is left on failure.
func (s *Server) spool(ctx context.Context, u *upload, r io.Reader, max int64, want string, trailer func() (string, error), what string) (_ *spooled, err error) {
	f, err := os.CreateTemp(s.cfg.UploadDir, ".upload-*")
	if err != nil {
		return nil, fmt.Errorf("spool %s for team %s: %w", what, u.teamID, err)
	}
	sp := &spooled{f: f}
	defer func() {
		if err != nil {
			sp.Close()
		}
	}()
	cr := &checkedReader{r: io.LimitReader(u.reader(ctx, r), max+1), h: sha256.New(), max: math.MaxInt64, want: want, trailer: trailer}
	sp.size, err = io.CopyBuffer(f, cr, make([]byte, 256<<10))
	if sp.size > max {
		return nil, &api.Error{Code: api.CodePayloadTooLarge,
			Message: fmt.Sprintf("the %s is larger than %d bytes, the most this server takes; nothing was kept", what, max),
			Details: map[string]any{"max_bytes": max}}
	}
	if cr.err != nil {
		return nil, cr.err
	}
	if err != nil {
		return nil, fmt.Errorf("receive %s for team %s: %w", what, u.teamID, err)
	}
	sp.sum = cr.sum
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return sp, nil
}
