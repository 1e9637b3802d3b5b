package service

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// TestFleetQualifier: a template's self-test runs once however often the
// fleet reports it ready, not before begin, and again after a run that
// failed to happen.
func TestFleetQualifier(t *testing.T) {
	var mu sync.Mutex
	runs := map[string]int{}
	failNext := map[string]bool{"flaky": true}
	ran := make(chan string, 16)
	q := newFleetQualifier(func(ctx context.Context, name string) error {
		mu.Lock()
		defer mu.Unlock()
		runs[name]++
		ran <- name
		if failNext[name] {
			failNext[name] = false
			return errors.New("no node has room")
		}
		return nil
	}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { q.run(ctx) })
	defer wg.Wait()
	defer cancel()

	q.ready("busybox")
	q.ready("busybox")
	select {
	case name := <-ran:
		t.Fatalf("self-test of %s ran before begin", name)
	default:
	}
	q.begin()
	want := func(name string) {
		t.Helper()
		select {
		case got := <-ran:
			if got != name {
				t.Fatalf("self-test of %s; want %s", got, name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no self-test of %s", name)
		}
	}
	want("busybox")
	q.ready("busybox")
	q.ready("flaky")
	want("flaky")
	// Failed: tried again when the fleet reports it ready again (once
	// the failure is recorded).
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.mu.Lock()
		tried := q.tried["flaky"]
		q.mu.Unlock()
		if !tried {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed self-test of flaky stays tried")
		}
		time.Sleep(time.Millisecond)
	}
	q.ready("flaky")
	want("flaky")
	q.ready("flaky")
	q.ready("busybox")
	q.ready("managed")
	want("managed")
	mu.Lock()
	defer mu.Unlock()
	if runs["busybox"] != 1 || runs["flaky"] != 2 || runs["managed"] != 1 {
		t.Fatalf("self-tests run %v; want busybox once, flaky twice (after its failure), managed once", runs)
	}
}
