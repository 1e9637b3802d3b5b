package id

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"sync"
	"time"
)

// Derivation makes the IDs of one idempotent request (a team's
// Idempotency-Key) instead of fresh ones, so that a second attempt of the
// request, on any replica, makes the same IDs and finds what the first
// attempt created. The IDs look like fresh ones: their time part is when
// the key was claimed, the rest is an HMAC-SHA256 keyed with the claim's
// random seed over the team, the key, the prefix and a count per prefix.
// The seed makes them unguessable, and the team inside the hash keeps one
// team's IDs from ever being another's.
type Derivation struct {
	seed  []byte
	team  string
	key   string
	at    time.Time
	mu    sync.Mutex
	count map[string]int // IDs made per prefix
	// resumed: the attempt took over an earlier attempt's claim.
	resumed bool
}

// NewDerivation returns the derivation of a team's Idempotency-Key claimed
// at at with seed.
func NewDerivation(seed []byte, team, key string, at time.Time) *Derivation {
	return &Derivation{seed: seed, team: team, key: key, at: at, count: map[string]int{}}
}

// Next returns the next ID of prefix: the first "sbx" ID of the request,
// then the second, and so on, the same sequence on every attempt.
func (d *Derivation) Next(prefix string) string {
	d.mu.Lock()
	n := d.count[prefix]
	d.count[prefix]++
	d.mu.Unlock()
	mac := hmac.New(sha256.New, d.seed)
	for _, part := range []string{d.team, d.key, prefix, strconv.Itoa(n)} {
		// Each part is length-prefixed, so no two sequences of parts hash
		// alike.
		var l [8]byte
		binary.BigEndian.PutUint64(l[:], uint64(len(part)))
		mac.Write(l[:])
		mac.Write([]byte(part))
	}
	sum := mac.Sum(nil)
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(d.at.UnixMilli())<<16)
	copy(b[6:], sum[:10])
	return encode(prefix, b)
}

// Resume marks d as the derivation of an attempt that took over an
// earlier attempt's claim (same seed, same IDs), which may have created
// resources under them; it returns d.
func (d *Derivation) Resume() *Derivation {
	d.resumed = true
	return d
}

type derivationKey struct{}

// WithDerivation returns ctx carrying d: the request it belongs to makes
// its resources' IDs with For.
func WithDerivation(ctx context.Context, d *Derivation) context.Context {
	return context.WithValue(ctx, derivationKey{}, d)
}

// Derived reports whether ctx belongs to an idempotent request, whose IDs
// For derives.
func Derived(ctx context.Context) bool {
	_, ok := ctx.Value(derivationKey{}).(*Derivation)
	return ok
}

// Resumed reports whether ctx belongs to an idempotent request's attempt
// that took over an earlier attempt's claim (Resume): only then may a
// resource already exist under an ID For derives. A first attempt's claim
// has a fresh random seed, so its derived IDs are new: a create may skip
// looking for them.
func Resumed(ctx context.Context) bool {
	d, ok := ctx.Value(derivationKey{}).(*Derivation)
	return ok && d.resumed
}

// For returns the ID of a resource a request creates: the next derived ID
// when ctx belongs to an idempotent request, a fresh one otherwise.
// Creates that use it look for the resource under that ID first, since a
// second attempt of the request derives the same.
func For(ctx context.Context, prefix string) string {
	if d, ok := ctx.Value(derivationKey{}).(*Derivation); ok {
		return d.Next(prefix)
	}
	return New(prefix)
}
