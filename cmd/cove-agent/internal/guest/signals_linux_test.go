package guest

import (
	"os/signal"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/agent/wire"
	"golang.org/x/sys/unix"
)

// TestCommandsStartWithDefaultSignals: with SIGHUP and SIGPIPE ignored by
// the agent's process (as nohup and systemd's IgnoreSIGPIPE leave them),
// a command ignores no signal, a SIGHUP ends it, and `yes | head -1`
// ends.
func TestCommandsStartWithDefaultSignals(t *testing.T) {
	signal.Ignore(unix.SIGHUP, unix.SIGPIPE)
	t.Cleanup(func() { signal.Reset(unix.SIGHUP, unix.SIGPIPE) })
	_, c := startServer(t, ServerConfig{})

	if _, err := c.Exec(t.Context(), wire.ExecRequest{ID: "ign", Argv: []string{"grep", "^SigIgn", "/proc/self/status"}, Env: []string{testPath}}); err != nil {
		t.Fatal(err)
	}
	if r := collect(t, c, "ign", 0); strings.TrimSpace(r.stdout) != "SigIgn:\t0000000000000000" {
		t.Fatalf("a command's ignored signals: %q, want none", r.stdout)
	}

	if _, err := c.Exec(t.Context(), wire.ExecRequest{ID: "hup", Argv: []string{"sleep", "1000"}, Env: []string{testPath}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Signal(t.Context(), "hup", "HUP"); err != nil {
		t.Fatal(err)
	}
	if r := collect(t, c, "hup", 0); r.exit != (wire.ExitData{ExitCode: -1, Signal: "HUP"}) {
		t.Errorf("sleep after SIGHUP: %+v, want ended by HUP", r.exit)
	}

	// yes ends when head has gone (SIGPIPE), so the pipeline ends.
	if _, err := c.Exec(t.Context(), wire.ExecRequest{ID: "pipe", Argv: []string{"sh", "-c", "yes | head -1"}, Env: []string{testPath}}); err != nil {
		t.Fatal(err)
	}
	if r := collect(t, c, "pipe", 0); r.stdout != "y\n" || r.exit != (wire.ExitData{}) {
		t.Errorf("yes | head -1: %q %+v", r.stdout, r.exit)
	}
}
