package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestPTYAttach: through the attach WebSocket, `tty` names a /dev/pts
// terminal, input reaches the command, and a resize changes `stty size`.
func TestPTYAttach(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	cmd, err := s.Admin.Exec(ctx, sb.ID, api.CreateCommandRequest{
		Command: "tty; stty size; read line; echo got:$line; stty size; exit 4",
		PTY:     &api.PTY{Cols: 80, Rows: 24},
	})
	if err != nil {
		t.Fatal(err)
	}
	att, err := s.Admin.Attach(ctx, sb.ID, cmd.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	var out bytes.Buffer
	readUntil := func(want string) {
		t.Helper()
		for !strings.Contains(out.String(), want) {
			data, done, err := att.Read(ctx)
			if err != nil || done {
				t.Fatalf("waiting for %q: %v done=%v; output so far %q", want, err, done, out.String())
			}
			out.Write(data)
		}
	}
	readUntil("24 80")
	if !strings.Contains(out.String(), "/dev/pts/") {
		t.Errorf("tty printed %q, want a /dev/pts path", out.String())
	}
	if err := att.Resize(ctx, 100, 30); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the resize and the input travel separately
	if err := att.Write(ctx, []byte("hello\r")); err != nil {
		t.Fatal(err)
	}
	readUntil("30 100")
	if !strings.Contains(out.String(), "got:hello") {
		t.Errorf("input did not reach the command: %q", out.String())
	}
	for {
		data, done, err := att.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
		out.Write(data)
	}
	if att.Exit == nil || *att.Exit.ExitCode != 4 {
		t.Errorf("exit = %+v, want code 4", att.Exit)
	}
}
