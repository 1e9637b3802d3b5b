package guest

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
	"golang.org/x/sys/unix"
)

// TestCommandsStartWithDefaultSignals: with SIGHUP and SIGPIPE ignored by
// the agent's process (as nohup and systemd's IgnoreSIGPIPE leave them),
// a command ignores no standard signal, a SIGHUP ends it, and `yes | head -1`
// ends.
func TestCommandsStartWithDefaultSignals(t *testing.T) {
	signal.Ignore(unix.SIGHUP, unix.SIGPIPE)
	t.Cleanup(func() { signal.Reset(unix.SIGHUP, unix.SIGPIPE) })
	_, c := startServer(t, ServerConfig{})

	// The standard signals, 1 to 31, are the low 31 bits; real-time ones
	// (glibc's own among them) are not the agent's to change.
	mask, line := commandSigIgn(t, c)
	if std := mask & (1<<31 - 1); std != 0 {
		t.Fatalf("a command's ignored signals: %q (standard ones %#x), want none of 1 to 31", line, std)
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

// TestCommandsStartWithDefaultSignalsAfterReset: a signal the kernel
// ignores while the Go runtime's record says it does not (signal.Ignore,
// then Notify, then Reset puts the SIG_IGN back) is not ignored by a
// command either: what counts is the kernel's mask.
func TestCommandsStartWithDefaultSignalsAfterReset(t *testing.T) {
	signal.Ignore(unix.SIGHUP)
	signal.Notify(make(chan os.Signal, 1), unix.SIGHUP)
	signal.Reset(unix.SIGHUP)
	// Caught after: commands of later tests get the default action.
	t.Cleanup(func() { signal.Notify(make(chan os.Signal, 1), unix.SIGHUP) })
	if signal.Ignored(unix.SIGHUP) {
		t.Skip("the runtime's record says SIGHUP is ignored: nothing to tell apart here")
	}
	mask, err := ignoredMask()
	if err != nil {
		t.Fatal(err)
	}
	if mask&(1<<(unix.SIGHUP-1)) == 0 {
		t.Skip("the kernel does not ignore SIGHUP after Reset on this Go version: nothing to tell apart here")
	}
	_, c := startServer(t, ServerConfig{})
	if got, line := commandSigIgn(t, c); got&(1<<(unix.SIGHUP-1)) != 0 {
		t.Errorf("a command's ignored signals: %q; want SIGHUP not among them", line)
	}
}

// commandSigIgn runs a command that reads its own SigIgn and returns the
// mask and the line.
func commandSigIgn(t *testing.T, c *client.Client) (uint64, string) {
	t.Helper()
	if _, err := c.Exec(t.Context(), wire.ExecRequest{ID: "ign", Argv: []string{"grep", "^SigIgn", "/proc/self/status"}, Env: []string{testPath}}); err != nil {
		t.Fatal(err)
	}
	r := collect(t, c, "ign", 0)
	mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(r.stdout, "SigIgn:")), 16, 64)
	if err != nil {
		t.Fatalf("%q: %v", r.stdout, err)
	}
	return mask, r.stdout
}

// TestIgnoredMaskIsTheKernels: the mask read signal by signal is the
// SigIgn the kernel shows for this process, for the standard signals
// (those a command could inherit as ignored that matter; a real-time one
// ignored by whatever started the test is not asked), with signals
// ignored and caught in between.
func TestIgnoredMaskIsTheKernels(t *testing.T) {
	signal.Ignore(unix.SIGUSR2, unix.SIGWINCH)
	t.Cleanup(func() { signal.Notify(make(chan os.Signal, 1), unix.SIGUSR2, unix.SIGWINCH) })
	for _, step := range []string{"ignored", "caught"} {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		var want uint64
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
				if want, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
					t.Fatal(err)
				}
			}
		}
		got, err := ignoredMask()
		if err != nil {
			t.Fatal(err)
		}
		const standard = 1<<31 - 1 // signals 1 to 31
		if got != want&standard {
			t.Errorf("%s: mask %x, the kernel's SigIgn %x (standard signals: %x)", step, got, want, want&standard)
		}
		if ignored := got&(1<<(unix.SIGUSR2-1)) != 0; ignored != (step == "ignored") {
			t.Errorf("%s: SIGUSR2 ignored %v", step, ignored)
		}
		signal.Notify(make(chan os.Signal, 1), unix.SIGUSR2, unix.SIGWINCH)
	}
}
