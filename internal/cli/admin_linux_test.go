package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMigrateStoreArguments: a store URL of the wrong kind, or a flag
// left out, is one readable line naming the flag and a non-zero exit,
// before anything is opened.
func TestMigrateStoreArguments(t *testing.T) {
	db := filepath.Join(t.TempDir(), "cove.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", "postgres://h/db", "--saves", "s3://b/p"}, "give --from sqlite:PATH"},
		{[]string{"--from", "sqlite:" + db, "--to", "mysql://h/db", "--saves", "s3://b/p"}, "--to: want postgres://"},
		{[]string{"--from", db, "--to", "postgres://h/db", "--saves", "s3://b/p"}, "--from \"" + db + "\": want sqlite:PATH"},
		{[]string{"--from", "sqlite:" + db, "--to", "postgres://h/db", "--saves", "s3://b/p"}, "--from: stat " + db},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), Env{
			Args:   append([]string{"admin", "migrate-store"}, c.args...),
			Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" },
		})
		if code != ExitCLI || !strings.Contains(stderr.String(), c.want) || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 125 and one line with %q", c.args, code, stderr.String(), c.want)
		}
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("a refused move made %s: %v", db, err)
	}
}
