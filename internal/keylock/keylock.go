// Package keylock hands out one mutex per key, kept only while someone
// holds or waits for it, so that work on one key (a file path, an
// idempotency key) waits only for work on the same key and the set of
// locks does not grow with every key ever seen.
package keylock

import "sync"

// Map is a set of per-key mutexes. The zero value is ready to use; a Map
// must not be copied after first use.
type Map struct {
	mu sync.Mutex
	m  map[string]*entry // keys with at least one holder or waiter
}

type entry struct {
	mu   sync.Mutex
	refs int // holders and waiters; guarded by Map.mu
}

// Lock waits for the lock of key and returns the function that releases
// it, which must be called exactly once.
func (l *Map) Lock(key string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*entry{}
	}
	e := l.m[key]
	if e == nil {
		e = &entry{}
		l.m[key] = e
	}
	e.refs++
	l.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, key)
		}
		l.mu.Unlock()
	}
}

// refs reports how many hold or wait for key's lock (for tests).
func (l *Map) refs(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[key]; e != nil {
		return e.refs
	}
	return 0
}

// size reports how many keys have a lock (for tests).
func (l *Map) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
