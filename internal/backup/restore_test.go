package backup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// TestRestoreKeepsRestoring: of the sandboxes between states when the
// backup was taken, one in the middle of a restore to a snapshot is kept
// as it is, for the restored serve to finish (its snapshot's files are
// in the backup); another without a save fails.
func TestRestoreKeepsRestoring(t *testing.T) {
	if restoring != lifecycle.Restoring {
		t.Fatalf("the restore's state reason is %q here and %q in lifecycle", restoring, lifecycle.Restoring)
	}
	ctx := t.Context()
	data := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(data, DatabaseName))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := st.CreateTeam(ctx, api.Team{ID: "team_1", Name: "one", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	for _, sb := range []api.Sandbox{
		{ID: "sbx_restoring", TeamID: "team_1", State: api.StateWaking, StateReason: lifecycle.Restoring + "snap_1", CreatedAt: now},
		{ID: "sbx_waking", TeamID: "team_1", State: api.StateWaking, CreatedAt: now},
	} {
		if err := st.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	dir := filepath.Join(t.TempDir(), "bk")
	if _, err := Backup(ctx, Config{DataDir: data, Dir: dir}); err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	r, err := Restore(ctx, RestoreConfig{Dir: dir, DataDir: restored})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Restoring, []string{"sbx_restoring"}) || !slices.Equal(r.Failed, []string{"sbx_waking"}) {
		t.Errorf("restored: restoring %v, failed %v; want sbx_restoring kept, sbx_waking failed", r.Restoring, r.Failed)
	}
	st, err = sqlite.Open(ctx, filepath.Join(restored, DatabaseName))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for id, want := range map[string]api.SandboxState{"sbx_restoring": api.StateWaking, "sbx_waking": api.StateFailed} {
		sb, err := st.GetSandbox(ctx, "team_1", id)
		if err != nil || sb.State != want {
			t.Errorf("%s after the restore: %s %q (%v), want %s", id, sb.State, sb.StateReason, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(restored, "saves")); err != nil {
		t.Errorf("no saves directory in the restored data dir: %v", err)
	}
}
