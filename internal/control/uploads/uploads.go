// Package uploads is the control plane's ledger of the bytes tenants send
// it (images, assets, source uploads): each team's open uploads, the bytes
// they reserve against the team's caps and the node's data disk while they
// arrive, and the private file each is spooled into before anything
// shared is locked.
//
// Uploads are the one way a tenant writes to the data disk at the speed it
// chooses. So that no team can stall or starve another through them:
//
//   - each streams into a private temporary file of its own, and shared
//     locks are taken only to commit what has fully arrived;
//   - a team has at most MaxPerTeam open at once (429 past it);
//   - the bytes are counted while they arrive, not once before: against
//     the team's asset or image cap, and against the node's data disk
//     (a node that holds room for them, so that its disk admission counts
//     them as promised);
//   - the HTTP layer cuts a body that sends nothing for a while
//     (--upload-idle-timeout), which fails the upload like any other
//     error: its temporary file is removed.
package uploads

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-dev/cove/api"
)

// An upload reserves ahead of what it has written as much again as it
// wrote, from minChunk to maxChunk: a trickle holds little of its team's
// cap, a fast upload reads the store once per few megabytes.
const (
	minChunk = 64 << 10
	maxChunk = 4 << 20
)

// RetryS is the Retry-After of an upload refused because the team has
// too many open.
const RetryS = 5

// DiskHolder is a node that counts bytes of its data disk besides its
// sandboxes' disks (internal/node/local): uploads not yet written. Its
// disk admission refuses sandboxes, and more holds, that no longer fit.
type DiskHolder interface {
	// HoldDisk counts bytes for key, replacing what key held; a larger
	// hold that does not fit is refused with resource_exhausted. 0
	// forgets key.
	HoldDisk(key string, bytes int64) error
}

// A Kind is the team cap an upload's bytes count against (assets',
// images'). A nil Kind is no team cap: such an upload is bounded by its
// own maximum size.
type Kind interface {
	// Cap is the team's limit in bytes; 0 or less is none.
	Cap() int64
	// Stored is what the team keeps of this kind already.
	Stored(ctx context.Context, teamID string) (int64, error)
	// Full is the error of an upload that does not fit: the team uses
	// used bytes (stored and reserved) of limit.
	Full(used, limit int64) error
}

// Config bounds the uploads.
type Config struct {
	// MaxPerTeam is how many uploads a team may have open at once.
	MaxPerTeam int
	// Dir holds uploads while they arrive (Spool); "" is the system's
	// temporary directory.
	Dir string
}

// Ledger is the memory of open uploads, per team.
type Ledger struct {
	cfg  Config
	disk DiskHolder // nil: the node counts no holds
	seq  atomic.Int64

	mu    sync.Mutex
	teams map[string]*team
	// open holds the seq of every open upload, of all teams.
	open map[int64]bool
}

// New returns an empty ledger. disk may be nil.
func New(cfg Config, disk DiskHolder) *Ledger {
	return &Ledger{cfg: cfg, disk: disk, teams: map[string]*team{}, open: map[int64]bool{}}
}

// team is one team's open uploads.
type team struct {
	// open is guarded by Ledger.mu.
	open int

	// mu orders the team's reservations: each reads the stored bytes and
	// the reserved ones together, and an upload's reservation is released
	// only after its bytes are stored.
	mu       sync.Mutex
	reserved map[Kind]int64
}

// Upload is one open upload: a slot of its team and the bytes it
// reserved. It is used by one goroutine.
type Upload struct {
	l      *Ledger
	teamID string
	team   *team
	kind   Kind
	key    string // the node's name of its disk hold
	seq    int64  // the order it began in, among all teams' uploads

	reserved, written int64
}

// Begin takes one of the team's upload slots, or answers 429 when they
// are all in use. The caller ends it.
func (l *Ledger) Begin(teamID string, kind Kind) (*Upload, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.teams[teamID]
	if t == nil {
		t = &team{reserved: map[Kind]int64{}}
		l.teams[teamID] = t
	}
	if t.open >= l.cfg.MaxPerTeam {
		return nil, &api.Error{Code: api.CodeResourceExhausted,
			Message: fmt.Sprintf("the team has %d uploads open, the most it may have at once; send this one when one of them ends", t.open),
			Details: map[string]any{"limit": l.cfg.MaxPerTeam, "retry_after_s": RetryS}}
	}
	t.open++
	seq := l.seq.Add(1)
	l.open[seq] = true
	return &Upload{l: l, teamID: teamID, team: t, kind: kind, key: "upload-" + strconv.FormatInt(seq, 10), seq: seq}, nil
}

// Open is how many uploads the team has open.
func (l *Ledger) Open(teamID string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.teams[teamID]; t != nil {
		return t.open
	}
	return 0
}

// Reserved is what the team's open uploads of kind reserve.
func (l *Ledger) Reserved(teamID string, kind Kind) int64 {
	l.mu.Lock()
	t := l.teams[teamID]
	l.mu.Unlock()
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reserved[kind]
}

// End releases the upload's reservation and slot; call it once its bytes
// are stored (they then count as the team's) or removed.
func (u *Upload) End() {
	u.team.mu.Lock()
	u.team.reserved[u.kind] -= u.reserved
	if u.team.reserved[u.kind] == 0 {
		delete(u.team.reserved, u.kind)
	}
	u.team.mu.Unlock()
	u.reserved = 0
	u.hold(0)
	l := u.l
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.open, u.seq)
	if u.team.open--; u.team.open == 0 {
		delete(l.teams, u.teamID)
	}
}

// hold asks the node to count bytes of its data disk for the upload.
func (u *Upload) hold(bytes int64) error {
	if u.l.disk != nil {
		return u.l.disk.HoldDisk(u.key, bytes)
	}
	return nil
}

// Reader counts r's bytes as they arrive: each read past what the upload
// reserved reserves more, or fails.
func (u *Upload) Reader(ctx context.Context, r io.Reader) io.Reader {
	return &countedReader{ctx: ctx, u: u, r: r}
}

type countedReader struct {
	ctx context.Context
	u   *Upload
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

// oldestWait bounds how long the oldest open upload waits for room on
// the data disk that younger uploads hold.
const oldestWait = 30 * time.Second

// grow accounts for n more bytes, reserving another chunk when they do
// not fit in the reservation: against the team's cap of the upload's kind
// and the node's data disk. The disk hold is what is reserved but not
// written yet: written bytes are already gone from the disk's free space.
//
// Uploads of unknown length reserve as they arrive, so several at once
// can fill the disk's room together and each find no room for its next
// chunk. Then the youngest give way: each fails at once, freeing what it
// held, while the oldest open upload waits for that room (as long as
// other uploads are open, at most oldestWait), so at least one goes on.
func (u *Upload) grow(ctx context.Context, n int64) error {
	need := u.written + n
	if need > u.reserved {
		var waited time.Duration
		for {
			disk, err := u.reserve(ctx, need)
			if err == nil {
				break
			}
			if !disk || waited >= oldestWait || !u.oldestOfSeveral() {
				return err
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(20 * time.Millisecond):
				waited += 20 * time.Millisecond
			}
		}
	}
	u.written = need
	return u.hold(u.reserved - u.written)
}

// oldestOfSeveral reports whether u began before every other open
// upload, and others are open.
func (u *Upload) oldestOfSeveral() bool {
	l := u.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for seq := range l.open {
		if seq < u.seq {
			return false
		}
	}
	return len(l.open) > 1
}

// Reserve makes sure the upload holds at least need bytes (and a chunk
// more where they fit): a body of known length reserves its whole size
// before its first byte, so uploads that together do not fit are refused
// at once rather than all failing part way.
func (u *Upload) Reserve(ctx context.Context, need int64) error {
	_, err := u.reserve(ctx, need)
	return err
}

// reserve is Reserve, also saying whether a refusal was the data disk's.
func (u *Upload) reserve(ctx context.Context, need int64) (disk bool, err error) {
	t := u.team
	t.mu.Lock()
	defer t.mu.Unlock()
	want := need + min(max(u.written, minChunk), maxChunk)
	if u.kind != nil {
		if limit := u.kind.Cap(); limit > 0 {
			used, err := u.kind.Stored(ctx, u.teamID)
			if err != nil {
				return false, err
			}
			room := limit - used - (t.reserved[u.kind] - u.reserved)
			if need > room {
				return false, u.kind.Full(used+t.reserved[u.kind]-u.reserved, limit)
			}
			want = min(want, room)
		}
	}
	if err := u.hold(want - u.written); err != nil {
		// Less than a chunk may still fit: the bytes at hand.
		if want == need {
			return true, fmt.Errorf("upload for team %s: %w", u.teamID, err)
		}
		want = need
		if err := u.hold(want - u.written); err != nil {
			return true, fmt.Errorf("upload for team %s: %w", u.teamID, err)
		}
	}
	t.reserved[u.kind] += want - u.reserved
	u.reserved = want
	return false, nil
}
