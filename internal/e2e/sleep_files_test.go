package e2e

import (
	"bytes"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// TestFileCallWakesAsleepSandbox: a file read on an asleep sandbox wakes it
// and returns the content; with wake=false it gets 409 and stays asleep.
func TestFileCallWakesAsleepSandbox(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	e2etest.MustOK(t, s.Admin, sb.ID, "echo kept > /workspace/note.txt")
	if _, err := s.Admin.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateAsleep, time.Minute); err != nil || got.State != api.StateAsleep {
		t.Fatalf("sleep: %s %v", got.State, err)
	}

	var buf bytes.Buffer
	_, err := s.Admin.DownloadFile(ctx, sb.ID, "/workspace/note.txt", &buf, cove.NoWake())
	if api.ErrorCode(err) != api.CodeConflict {
		t.Errorf("read with wake=false: %v, want conflict", err)
	}
	if got, _ := s.Admin.GetSandbox(ctx, sb.ID); got.State != api.StateAsleep {
		t.Errorf("after a wake=false call the sandbox is %s", got.State)
	}

	buf.Reset()
	if _, err := s.Admin.DownloadFile(ctx, sb.ID, "/workspace/note.txt", &buf); err != nil {
		t.Fatalf("read on an asleep sandbox: %v", err)
	}
	if buf.String() != "kept\n" {
		t.Errorf("content = %q", buf.String())
	}
	if got, _ := s.Admin.GetSandbox(ctx, sb.ID); got.State != api.StateRunning {
		t.Errorf("after the read the sandbox is %s, want running", got.State)
	}
}
