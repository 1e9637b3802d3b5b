package cli

import (
	"bytes"
	"context"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestVersion: `cove version` and `cove --version` print one line, the
// same, with the version, the commit and the Go version, and need no
// server or key.
func TestVersion(t *testing.T) {
	want := regexp.MustCompile(`^cove \S+ \(commit (?:[0-9a-f]{7,}(?:-dirty)?|unknown), ` + regexp.QuoteMeta(runtime.Version()) + `\)\n$`)
	var lines []string
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errb bytes.Buffer
		env := Env{Args: args, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
			Getenv: func(string) string { return "" }}
		if code := Main(context.Background(), env); code != 0 {
			t.Fatalf("cove %v: exit %d, stderr %q", args, code, errb.String())
		}
		if !want.MatchString(out.String()) {
			t.Errorf("cove %v printed %q, want one line like \"cove dev (commit 1a2b3c4, %s)\"", args, out.String(), runtime.Version())
		}
		lines = append(lines, out.String())
	}
	if lines[0] != lines[1] {
		t.Errorf("cove version %q and cove --version %q differ", lines[0], lines[1])
	}
}
