//go:build linux

package backup_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// TestDowngradeRefused: cove serve on a database a newer cove migrated
// exits at once with one line naming both schema versions.
func TestDowngradeRefused(t *testing.T) {
	e2etest.RequireRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "cove.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	var known int
	if err := db.QueryRow("SELECT MAX(version) FROM schema_migrations").Scan(&known); err != nil {
		t.Fatal(err)
	}
	newer := known + 7
	if _, err := db.Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from_the_future', '2030-01-01T00:00:00Z')", newer); err != nil {
		t.Fatal(err)
	}
	db.Close()

	cmd := exec.Command(filepath.Join(e2etest.BinDir(), "cove"), "serve", "--data-dir", dir,
		"--listen", "127.0.0.1:0", "--gateway-port", "0", "--dns-port", "0", "--dns-upstream", "none",
		"--nft-table", "covetdg"+e2etest.RunID(), "--cgroup-parent", "/cove-test-"+e2etest.RunID()+"-downgrade",
		"--images-dir", e2etest.ImagesDir(), "--build-managed=false", "--default-template", "busybox")
	cmd.Env = append(os.Environ(), "HOME="+dir)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Cleanup(func() {
		exec.Command("nft", "delete", "table", "inet", "covetdg"+e2etest.RunID()).Run()
		e2etest.RemoveCgroupParent(t, "/cove-test-"+e2etest.RunID()+"-downgrade")
	})
	if err == nil {
		t.Fatalf("cove serve started on a newer schema; stdout %q", stdout.String())
	}
	out := strings.TrimSpace(stderr.String())
	lines := strings.Split(out, "\n")
	last := lines[len(lines)-1]
	want := []string{fmt.Sprintf("version %d", newer), fmt.Sprintf("up to %d", known)}
	for _, w := range want {
		if !strings.Contains(last, w) {
			t.Fatalf("stderr's last line %q does not name %q; stderr:\n%s", last, w, out)
		}
	}
	if n := strings.Count(out, "\n") + 1; n != 1 {
		t.Errorf("stderr has %d lines, want one:\n%s", n, out)
	}
	t.Logf("refusal: %s", last)
}
