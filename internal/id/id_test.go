package id

import (
	"testing"
	"time"
)

func TestNewSortsByTime(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	prev := ""
	for i := range 100 {
		s := NewAt("sbx", t0.Add(time.Duration(i)*time.Millisecond))
		if !HasPrefix(s, "sbx") {
			t.Fatalf("%q does not look like an sbx ID", s)
		}
		if s <= prev {
			t.Fatalf("%q sorts before %q", s, prev)
		}
		prev = s
	}
}

func TestHasPrefix(t *testing.T) {
	good := New("cmd")
	tests := []struct {
		in   string
		want bool
	}{
		{good, true},
		{"sbx" + good[3:], false},
		{good + "x", false},
		{"cmd_" + "ABCDEFGHJKMNPQRSTVWXYZ0123", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := HasPrefix(tt.in, "cmd"); got != tt.want {
			t.Errorf("HasPrefix(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
