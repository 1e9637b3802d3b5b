package nodeapi

import (
	"testing"
	"time"
)

// TestBacklog: events come after the sequence number asked for, in
// order; the backlog keeps only the newest and says how many a late
// reader lost; a sequence number ahead of the node's (another run's)
// reads from the newest.
func TestBacklog(t *testing.T) {
	b := newBacklog("e", 3)
	for range 5 {
		b.add(Event{Kind: EventExit})
	}
	tests := []struct {
		after    int64
		first, n int64
		wantLost int64
	}{
		{after: 4, first: 5, n: 1},
		{after: 2, first: 3, n: 3},
		{after: 0, first: 3, n: 3, wantLost: 2},
		{after: 1, first: 3, n: 3, wantLost: 1},
		{after: 5, n: 0},
		{after: 9, n: 0},
	}
	for _, tt := range tests {
		events, lost, _ := b.since(tt.after)
		if int64(len(events)) != tt.n || lost != tt.wantLost {
			t.Fatalf("after %d: %d events, %d lost; want %d, %d lost", tt.after, len(events), lost, tt.n, tt.wantLost)
		}
		for i, e := range events {
			if e.Seq != tt.first+int64(i) {
				t.Fatalf("after %d: event %d has seq %d", tt.after, i, e.Seq)
			}
		}
	}
}

// TestOperationsExpire: an answer is kept for OpTTL after its call ended,
// then forgotten; a call whose body failed is forgotten at once.
func TestOperationsExpire(t *testing.T) {
	o := newOperations()
	now := time.Unix(1_000_000, 0)
	op, run := o.begin("k", now)
	if !run {
		t.Fatal("a new operation does not run")
	}
	if _, run := o.begin("k", now); run {
		t.Fatal("an operation under way runs again")
	}
	o.end("k", op, true, now)
	if _, run := o.begin("k", now.Add(OpTTL-time.Second)); run {
		t.Fatal("an answer was forgotten before OpTTL")
	}
	if _, run := o.begin("other", now.Add(OpTTL+time.Minute)); !run {
		t.Fatal("a new operation does not run")
	}
	if _, run := o.begin("k", now.Add(OpTTL+time.Minute)); !run {
		t.Fatal("an answer was kept after OpTTL")
	}
	op, _ = o.begin("broken", now)
	o.end("broken", op, false, now)
	if _, run := o.begin("broken", now); !run {
		t.Fatal("a call whose body failed is not run again")
	}
}
