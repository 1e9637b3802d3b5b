package keylock

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// waitRefs waits until n hold or wait for key: a state, not a clock.
func waitRefs(t *testing.T, l *Map, key string, n int) {
	t.Helper()
	for l.refs(key) != n {
		runtime.Gosched()
	}
}

func TestLockWaitsForSameKeyOnly(t *testing.T) {
	var l Map
	unlockA := l.Lock("a")

	// Another key is free while "a" is held (a hang here is the failure).
	l.Lock("b")()

	got := make(chan struct{})
	go func() {
		unlock := l.Lock("a")
		close(got)
		unlock()
	}()
	waitRefs(t, &l, "a", 2) // the second locker waits
	select {
	case <-got:
		t.Fatal("a second Lock of a held key returned before Unlock")
	default:
	}
	unlockA()
	<-got
	waitRefs(t, &l, "a", 0)
	if n := l.size(); n != 0 {
		t.Errorf("%d keys kept after every lock was released", n)
	}
}

// TestLockConcurrent increments per-key counters without atomics under the
// key's lock: run with -race, any overlap of two holders of a key is a
// reported race, and a lost increment a wrong count.
func TestLockConcurrent(t *testing.T) {
	tests := []struct {
		name             string
		keys, goroutines int
		rounds           int
	}{
		{"one key", 1, 16, 200},
		{"few keys", 4, 32, 200},
		{"many keys", 64, 32, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l Map
			counts := make([]int, tt.keys) // guarded by the lock of key i
			var wg sync.WaitGroup
			for g := range tt.goroutines {
				wg.Go(func() {
					for r := range tt.rounds {
						k := (g + r) % tt.keys
						unlock := l.Lock(fmt.Sprint("key", k))
						counts[k]++
						unlock()
					}
				})
			}
			wg.Wait()
			total := 0
			for _, c := range counts {
				total += c
			}
			if want := tt.goroutines * tt.rounds; total != want {
				t.Errorf("%d increments, want %d", total, want)
			}
			if n := l.size(); n != 0 {
				t.Errorf("%d keys kept after every lock was released", n)
			}
		})
	}
}
