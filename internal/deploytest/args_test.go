package deploytest

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/cli"
)

// repoRoot is the checkout's root, found from this file's path.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// checkArgs has cove's own command line parse args (a server command and
// its flags), with --help so that nothing runs: an unknown flag or a value
// its flag refuses fails the test.
func checkArgs(t *testing.T, what string, args []string) {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("%s: no arguments", what)
	}
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), cli.Env{
		Args:   append(append([]string{}, args...), "--help"),
		Stdout: &out,
		Stderr: &errb,
		Getenv: func(string) string { return "" },
	})
	if code != 0 {
		t.Errorf("%s: cove %s: exit %d: %s", what, strings.Join(args, " "), code, strings.TrimSpace(errb.String()))
		return
	}
	// Help of the root command would mean the subcommand was not found.
	if !strings.Contains(out.String(), "cove "+args[0]) {
		t.Errorf("%s: cove %s --help printed no help of %q:\n%s", what, strings.Join(args, " "), args[0], out.String())
	}
}

// flagValue is the value of --name in args (as --name=V or --name V).
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}
