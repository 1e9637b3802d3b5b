package lifecycle

import (
	"path"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
)

// FuzzValidatePath: a path is accepted only when it is absolute and free of
// NUL, and what comes back is clean and stays absolute.
func FuzzValidatePath(f *testing.F) {
	for _, s := range []string{"/workspace", "", "rel", "/a/../../b", "/a\x00b", "//x//y/", "/" + strings.Repeat("a", 5000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := validatePath("path", p)
		if err != nil {
			if api.ErrorCode(err) != api.CodeInvalidArgument {
				t.Fatalf("%q: %v is not invalid_argument", p, err)
			}
			return
		}
		if strings.ContainsRune(p, 0) || !strings.HasPrefix(p, "/") {
			t.Fatalf("%q accepted", p)
		}
		if got != path.Clean(got) || !strings.HasPrefix(got, "/") || strings.Contains(got, "..") && got != path.Clean(p) {
			t.Fatalf("%q gave %q", p, got)
		}
	})
}

// FuzzValidateName: accepted names are hostname-safe.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"demo", "", "Demo", "a-", "-a", "a_b", strings.Repeat("a", 63), strings.Repeat("a", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if validateName(name) != nil || name == "" {
			return
		}
		if len(name) > 63 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" ||
			strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") {
			t.Fatalf("%q accepted", name)
		}
	})
}
