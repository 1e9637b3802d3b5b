package uploads_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/uploads"
)

// memKind is a team cap over bytes kept in memory.
type memKind struct {
	limit  int64
	mu     sync.Mutex
	stored map[string]int64
}

func (k *memKind) Cap() int64 { return k.limit }

func (k *memKind) Stored(_ context.Context, teamID string) (int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stored[teamID], nil
}

func (k *memKind) Full(used, limit int64) error {
	return api.Errorf(api.CodeInsufficientStorage, "%d of %d", used, limit)
}

// disk is a node's data disk that counts holds by key.
type disk struct {
	mu      sync.Mutex
	room    int64 // 0: no bound
	holds   map[string]int64
	refused int // holds refused
}

func (d *disk) HoldDisk(key string, bytes int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.holds == nil {
		d.holds = map[string]int64{}
	}
	if d.room > 0 && bytes > d.holds[key] && d.held()-d.holds[key]+bytes > d.room {
		d.refused++
		return api.Errorf(api.CodeResourceExhausted, "no room for the upload")
	}
	if bytes == 0 {
		delete(d.holds, key)
	} else {
		d.holds[key] = bytes
	}
	return nil
}

func (d *disk) held() int64 {
	var n int64
	for _, b := range d.holds {
		n += b
	}
	return n
}

func (d *disk) total() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held()
}

// TestSlotsPerTeam: a team has at most MaxPerTeam uploads open (429 with
// a Retry-After past them); another team's are not counted with them, and
// an ended upload frees its slot.
func TestSlotsPerTeam(t *testing.T) {
	l := uploads.New(uploads.Config{MaxPerTeam: 2, Dir: t.TempDir()}, nil)
	a1, err := l.Begin("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Begin("a", nil); err != nil {
		t.Fatal(err)
	}
	_, err = l.Begin("a", nil)
	var e *api.Error
	if !errors.As(err, &e) || e.Code != api.CodeResourceExhausted || e.Details["retry_after_s"] != uploads.RetryS {
		t.Fatalf("a third upload of team a: %v; want resource_exhausted with retry_after_s", err)
	}
	b, err := l.Begin("b", nil)
	if err != nil {
		t.Fatalf("team b's first upload while a's slots are full: %v", err)
	}
	b.End()
	a1.End()
	if _, err := l.Begin("a", nil); err != nil {
		t.Fatalf("team a's upload after one ended: %v", err)
	}
	if n := l.Open("a"); n != 2 {
		t.Fatalf("team a has %d open; want 2", n)
	}
}

// trickle sends body, then fails with err (nil: EOF).
type trickle struct {
	r   io.Reader
	err error
}

func (t *trickle) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err == io.EOF && t.err != nil {
		return n, t.err
	}
	return n, err
}

// TestReleasedOnEveryPath: whatever becomes of an upload (stored, too
// large, a digest that differs, past the team's cap, a body cut, a
// reservation refused before the first byte, no room on the node's disk),
// once it ends its slot, its bytes reserved against the team's cap and
// its hold on the node's data disk are all released, and its spool file
// is gone unless it was returned.
func TestReleasedOnEveryPath(t *testing.T) {
	const limit = 1 << 20
	body := bytes.Repeat([]byte("x"), 300<<10)
	cut := errors.New("the client went away")
	tests := []struct {
		name     string
		stored   int64 // the team's bytes already kept
		room     int64 // the node's data disk; 0 unbounded
		reserve  int64 // before the body
		max      int64
		want     string
		body     io.Reader
		wantCode api.Code // "" for a spooled upload
		wantErr  error
	}{
		{name: "stored", max: limit, body: bytes.NewReader(body)},
		{name: "too large", max: 100 << 10, body: bytes.NewReader(body), wantCode: api.CodePayloadTooLarge},
		{name: "digest differs", max: limit, want: strings.Repeat("0", 64), body: bytes.NewReader(body), wantCode: api.CodeUnprocessable},
		{name: "past the team cap", stored: limit - 200<<10, max: limit, body: bytes.NewReader(body), wantCode: api.CodeInsufficientStorage},
		{name: "body cut", max: limit, body: &trickle{r: bytes.NewReader(body), err: cut}, wantErr: cut},
		{name: "reservation refused", stored: limit - 10, reserve: 100, max: limit, body: bytes.NewReader(body), wantCode: api.CodeInsufficientStorage},
		{name: "no room on the disk", room: 16 << 10, max: limit, body: bytes.NewReader(body), wantCode: api.CodeResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			d := &disk{room: tt.room}
			k := &memKind{limit: limit, stored: map[string]int64{"a": tt.stored}}
			l := uploads.New(uploads.Config{MaxPerTeam: 2, Dir: dir}, d)
			// Another upload of the team stays open throughout, reserving
			// nothing: what the tested one leaves behind stays visible.
			keep, err := l.Begin("a", k)
			if err != nil {
				t.Fatal(err)
			}
			defer keep.End()
			u, err := l.Begin("a", k)
			if err != nil {
				t.Fatal(err)
			}
			var sp *uploads.Spooled
			if tt.reserve > 0 {
				err = u.Reserve(t.Context(), tt.reserve)
			}
			if err == nil {
				sp, err = l.Spool(t.Context(), u, tt.body, tt.max, tt.want, nil, "asset")
			}
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("spool: %v; want %v", err, tt.wantErr)
				}
			case tt.wantCode == "":
				if err != nil {
					t.Fatalf("spool: %v", err)
				}
				if sp.Size != int64(len(body)) {
					t.Fatalf("spooled %d bytes; want %d", sp.Size, len(body))
				}
			default:
				if api.ErrorCode(err) != tt.wantCode {
					t.Fatalf("spool: %v; want %s", err, tt.wantCode)
				}
			}
			u.End()
			if sp != nil {
				sp.Close()
			}
			if n := l.Open("a"); n != 1 {
				t.Errorf("after its end: %d uploads open; want 1, the other", n)
			}
			if n := l.Reserved("a", k); n != 0 {
				t.Errorf("after its end: %d bytes reserved against the team's cap", n)
			}
			if n := d.total(); n != 0 {
				t.Errorf("after its end: the node's disk holds %d bytes", n)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("after its end: %d files left in the upload dir", len(ents))
			}
			// The slot is free again.
			u2, err := l.Begin("a", k)
			if err != nil {
				t.Fatalf("the next upload: %v", err)
			}
			u2.End()
		})
	}
}

// TestCapSharedWhileArriving: the bytes a team's open uploads reserve
// count against its cap together with what it keeps: a second upload
// finds the room the first reserved taken, and another team's cap is its
// own.
func TestCapSharedWhileArriving(t *testing.T) {
	const limit = 1 << 20
	k := &memKind{limit: limit, stored: map[string]int64{"a": 100 << 10}}
	l := uploads.New(uploads.Config{MaxPerTeam: 4, Dir: t.TempDir()}, nil)
	first, err := l.Begin("a", k)
	if err != nil {
		t.Fatal(err)
	}
	defer first.End()
	if err := first.Reserve(t.Context(), 600<<10); err != nil {
		t.Fatal(err)
	}
	second, err := l.Begin("a", k)
	if err != nil {
		t.Fatal(err)
	}
	defer second.End()
	// 100 KiB kept and 600 KiB reserved, with a chunk of 64 KiB ahead,
	// leave 260 KiB.
	if err := second.Reserve(t.Context(), 300<<10); api.ErrorCode(err) != api.CodeInsufficientStorage {
		t.Fatalf("300 KiB more of team a: %v; want insufficient_storage", err)
	}
	if err := second.Reserve(t.Context(), 250<<10); err != nil {
		t.Fatalf("250 KiB more of team a: %v", err)
	}
	other, err := l.Begin("b", k)
	if err != nil {
		t.Fatal(err)
	}
	defer other.End()
	if err := other.Reserve(t.Context(), 900<<10); err != nil {
		t.Fatalf("team b's 900 KiB: %v", err)
	}
}

// TestIdleBodyCut: a body that stops sending is cut after the idle
// timeout (the HTTP layer's --upload-idle-timeout, here a timer on the
// body) and the upload then holds nothing: not its slot, its reservation
// or its spool file. Time is synctest's: nothing sleeps on the wall clock.
func TestIdleBodyCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 60 * time.Second
		dir := t.TempDir()
		k := &memKind{limit: 1 << 30, stored: map[string]int64{}}
		l := uploads.New(uploads.Config{MaxPerTeam: 1, Dir: dir}, nil)
		pr, pw := io.Pipe()
		idleErr := api.Errorf(api.CodeInvalidArgument, "the upload sent nothing for %s and was cut", idle)
		go func() {
			pw.Write(bytes.Repeat([]byte("y"), 10<<10))
			// Then nothing: the idle timer cuts the body.
			time.AfterFunc(idle, func() { pw.CloseWithError(idleErr) })
		}()
		start := time.Now()
		u, err := l.Begin("a", k)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := l.Spool(t.Context(), u, pr, 1<<30, "", nil, "asset")
			u.End()
			done <- err
		}()
		synctest.Wait()
		if l.Open("a") != 1 || l.Reserved("a", k) == 0 {
			t.Fatalf("while the body is silent: %d open, %d reserved; want the upload open and holding", l.Open("a"), l.Reserved("a", k))
		}
		if _, err := l.Begin("a", k); api.ErrorCode(err) != api.CodeResourceExhausted {
			t.Fatalf("a second upload while the silent one holds the slot: %v", err)
		}
		err = <-done
		if api.ErrorCode(err) != api.CodeInvalidArgument {
			t.Fatalf("the cut upload: %v; want invalid_argument", err)
		}
		if d := time.Since(start); d != idle {
			t.Errorf("cut after %s; want %s", d, idle)
		}
		if l.Open("a") != 0 || l.Reserved("a", k) != 0 {
			t.Errorf("after the cut: %d open, %d reserved", l.Open("a"), l.Reserved("a", k))
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("after the cut: %d files left in the upload dir", len(ents))
		}
		u2, err := l.Begin("a", k)
		if err != nil {
			t.Fatalf("the next upload after the cut: %v", err)
		}
		u2.End()
	})
}

// TestOldestGoesOn: uploads of unknown length that fill the disk's room
// together do not all fail: the oldest open upload waits for the room a
// younger one holds, and the younger gives way at once.
func TestOldestGoesOn(t *testing.T) {
	d := &disk{room: 1 << 20}
	l := uploads.New(uploads.Config{MaxPerTeam: 4, Dir: t.TempDir()}, d)
	older, err := l.Begin("team_a", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer older.End()
	younger, err := l.Begin("team_b", nil)
	if err != nil {
		t.Fatal(err)
	}
	read := func(u *uploads.Upload, n int) error {
		_, err := u.Reader(t.Context(), bytes.NewReader(make([]byte, n))).Read(make([]byte, n))
		return err
	}
	// The younger holds most of the room (bytes it is about to write).
	if err := younger.Reserve(t.Context(), 900<<10); err != nil {
		t.Fatal(err)
	}
	// The older does not fit beside it: it waits, asking again…
	done := make(chan error, 1)
	go func() { done <- read(older, 600<<10) }()
	for {
		d.mu.Lock()
		asked := d.refused
		d.mu.Unlock()
		if asked >= 4 { // two tries each time, a chunk and the bytes at hand
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the oldest upload gave up while a younger one held the room: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	// …while the younger, finding no room for more, fails at once.
	if err := read(younger, 2<<20); api.ErrorCode(err) != api.CodeResourceExhausted {
		t.Fatalf("the younger upload past the room: %v", err)
	}
	younger.End()
	if err := <-done; err != nil {
		t.Fatalf("the oldest upload, once the younger ended: %v", err)
	}
}
