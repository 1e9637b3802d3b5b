package replicas

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/testsupport/pgserver"
)

// TestServeOnPostgres runs `cove serve --store postgres://…`: the
// all-in-one server keeps everything in the database, not in a SQLite
// file, and finds it again after a restart.
func TestServeOnPostgres(t *testing.T) {
	e2etest.RequireRoot(t)
	url := pgserver.Start(t).NewDatabase(t)
	s := e2etest.StartServer(t, e2etest.WithArgs("--store", url, "--warm-pool", "0"))
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Name: "on-pg"})
	res := e2etest.Sh(t, s.Admin, sb.ID, "echo kept > /workspace/f; echo out")
	if _, err := s.Admin.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateAsleep, 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	s.Stop(syscall.SIGTERM)
	if _, err := os.Stat(filepath.Join(s.DataDir, "cove.db")); !os.IsNotExist(err) {
		t.Errorf("cove serve --store postgres:// made a SQLite file: %v", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM sandboxes WHERE id = $1 AND state = 'asleep'", sb.ID).Scan(&n)
	conn.Close(ctx)
	if err != nil || n != 1 {
		t.Fatalf("the database holds %d rows of the asleep sandbox (%v)", n, err)
	}

	s.Start()
	if _, err := s.Admin.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateRunning, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := e2etest.MustOK(t, s.Admin, sb.ID, "cat /workspace/f"); got != "kept\n" {
		t.Errorf("after the restart and a wake: %q", got)
	}
	cmd, err := s.Admin.GetCommand(ctx, sb.ID, res.Command.ID)
	if err != nil || cmd.State != api.CommandExited {
		t.Errorf("the command before the restart: %+v %v", cmd, err)
	}
}
