package fspath

import (
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"/workspace/a/../b", "/workspace/b", true},
		{"/", "/", true},
		{"//x//y/", "/x/y", true},
		{"", "", false},
		{"relative/x", "", false},
		{"/a\x00b", "", false},
		{"/" + strings.Repeat("a", MaxPath), "", false},
	}
	for _, tt := range tests {
		got, err := Clean(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("Clean(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestValidVersion(t *testing.T) {
	tests := map[string]bool{
		"abc-DEF_123":                     true,
		"":                                false,
		"a b":                             false,
		`"quoted"`:                        false,
		strings.Repeat("a", MaxVersion):   true,
		strings.Repeat("a", MaxVersion+1): false,
	}
	for v, want := range tests {
		if got := ValidVersion(v); got != want {
			t.Errorf("ValidVersion(%q) = %v, want %v", v, got, want)
		}
	}
}
