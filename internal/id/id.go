// Package id makes cove's prefixed identifiers: a prefix, an underscore and
// 26 characters of lowercase base32 whose first ten encode the creation time
// in milliseconds, so IDs of one kind sort by creation.
package id

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"time"
)

const alphabet = "0123456789abcdefghjkmnpqrstvwxyz" // Crockford base32, lowercase

// New returns a fresh ID such as "sbx_01jd…".
func New(prefix string) string { return NewAt(prefix, time.Now()) }

// NewAt returns a fresh ID whose time part is t.
func NewAt(prefix string, t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return encode(prefix, b)
}

// encode writes prefix, an underscore and the 128 bits of b as 26 base32
// digits.
func encode(prefix string, b [16]byte) string {
	var sb strings.Builder
	sb.Grow(len(prefix) + 27)
	sb.WriteString(prefix)
	sb.WriteByte('_')
	// 128 bits as 26 base32 digits, most significant first.
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	for i := 25; i >= 0; i-- {
		shift := uint(i * 5)
		var v uint64
		switch {
		case shift >= 64:
			v = hi >> (shift - 64)
		case shift > 59:
			v = lo>>shift | hi<<(64-shift)
		default:
			v = lo >> shift
		}
		sb.WriteByte(alphabet[v&31])
	}
	return sb.String()
}

// HasPrefix reports whether s looks like an ID of the given prefix.
func HasPrefix(s, prefix string) bool {
	if !strings.HasPrefix(s, prefix+"_") || len(s) != len(prefix)+27 {
		return false
	}
	for _, c := range s[len(prefix)+1:] {
		if !strings.ContainsRune(alphabet, c) {
			return false
		}
	}
	return true
}
