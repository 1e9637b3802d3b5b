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

func TestDerived(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	seed := []byte("0123456789abcdef")
	first := NewDerivation(seed, "team_a", "k1", at)
	again := NewDerivation(seed, "team_a", "k1", at)
	a1, a2, b1 := first.Next("sbx"), first.Next("sbx"), first.Next("cmd")
	if got := again.Next("sbx"); got != a1 {
		t.Errorf("a second attempt's first ID = %s; want %s", got, a1)
	}
	if got := again.Next("sbx"); got != a2 {
		t.Errorf("a second attempt's second ID = %s; want %s", got, a2)
	}
	if a1 == a2 {
		t.Errorf("two IDs of one request are both %s", a1)
	}
	for _, x := range []string{a1, a2} {
		if !HasPrefix(x, "sbx") {
			t.Errorf("%s does not look like an sbx ID", x)
		}
	}
	if !HasPrefix(b1, "cmd") {
		t.Errorf("%s does not look like a cmd ID", b1)
	}
	fresh := NewAt("sbx", at)
	if a1[:14] != fresh[:14] {
		t.Errorf("%s does not carry the claim's time as %s does", a1, fresh)
	}
	others := []*Derivation{
		NewDerivation(seed, "team_b", "k1", at),                   // another team, same key and seed
		NewDerivation(seed, "team_a", "k2", at),                   // another key
		NewDerivation([]byte("another seed"), "team_a", "k1", at), // another claim
	}
	for i, d := range others {
		if got := d.Next("sbx"); got == a1 {
			t.Errorf("derivation %d made %s too", i, got)
		}
	}
}

func TestFor(t *testing.T) {
	ctx := t.Context()
	if Derived(ctx) {
		t.Fatal("a plain context is derived")
	}
	if For(ctx, "sbx") == For(ctx, "sbx") {
		t.Fatal("two fresh IDs are equal")
	}
	seed := []byte("s")
	at := time.Now()
	d := WithDerivation(ctx, NewDerivation(seed, "team_a", "k", at))
	if !Derived(d) {
		t.Fatal("a derived context is not")
	}
	if Resumed(ctx) || Resumed(d) {
		t.Fatal("a plain or first attempt's context is resumed")
	}
	if !Resumed(WithDerivation(ctx, NewDerivation(seed, "team_a", "k", at).Resume())) {
		t.Fatal("a resumed derivation's context is not")
	}
	if got, want := For(d, "wl"), NewDerivation(seed, "team_a", "k", at).Next("wl"); got != want {
		t.Fatalf("For = %s; want %s", got, want)
	}
}
