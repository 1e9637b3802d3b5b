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

func TestCheckXattrs(t *testing.T) {
	many := map[string]string{}
	for i := range MaxXattrs + 1 {
		many["user.k"+strings.Repeat("x", i)] = ""
	}
	for _, tt := range []struct {
		name string
		x    map[string]string
		ok   bool
	}{
		{"none", nil, true},
		{"user", map[string]string{"user.e2b.author": "mish", "user.a": ""}, true},
		{"trusted", map[string]string{"trusted.overlay.opaque": "y"}, false},
		{"security", map[string]string{"security.capability": "x"}, false},
		{"system", map[string]string{"system.posix_acl_access": "x"}, false},
		{"bare prefix", map[string]string{"user.": "x"}, false},
		{"no prefix", map[string]string{"author": "x"}, false},
		{"NUL in name", map[string]string{"user.a\x00b": "x"}, false},
		{"not UTF-8", map[string]string{"user.a": "\xff"}, false},
		{"long name", map[string]string{"user." + strings.Repeat("n", MaxXattrName): ""}, false},
		{"too many", many, false},
		{"too big", map[string]string{"user.a": strings.Repeat("v", MaxXattrBytes-len("user.a")+1)}, false},
		{"just fits", map[string]string{"user.a": strings.Repeat("v", MaxXattrBytes-len("user.a"))}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := CheckXattrs(tt.x); (err == nil) != tt.ok {
				t.Errorf("CheckXattrs = %v; want ok %v", err, tt.ok)
			}
		})
	}
}
