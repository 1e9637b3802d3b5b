package runtime

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRaiseSysctl(t *testing.T) {
	for _, tc := range []struct {
		name  string
		have  string // the file's content; "" for no file
		after string
		logs  string // what the log must hold ("" for nothing)
	}{
		{name: "lower is raised", have: "32768\n", after: "4194304", logs: "raised a kernel limit"},
		{name: "equal is kept", have: "4194304\n", after: "4194304\n"},
		{name: "higher is never lowered", have: "5000000\n", after: "5000000\n"},
		{name: "unreadable warns", logs: "read a kernel limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "pid_max")
			if tc.have != "" {
				if err := os.WriteFile(path, []byte(tc.have), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			raiseSysctl(path, PidMaxLimit, slog.New(slog.NewTextHandler(&logs, nil)))
			if tc.have != "" {
				if b, err := os.ReadFile(path); err != nil || string(b) != tc.after {
					t.Fatalf("after: %q (%v), want %q", b, err, tc.after)
				}
			}
			if tc.logs == "" && logs.Len() > 0 || tc.logs != "" && !strings.Contains(logs.String(), tc.logs) {
				t.Fatalf("logs %q, want %q", logs.String(), tc.logs)
			}
		})
	}
}

// TestRaiseSysctlReadOnly: a limit the kernel will not let the node
// change (kernel.ngroups_max is read-only, root included) is kept, with a
// warning, and the node goes on.
func TestRaiseSysctlReadOnly(t *testing.T) {
	const path = "/proc/sys/kernel/ngroups_max"
	before, err := readSysctl(path)
	if err != nil {
		t.Skip(err)
	}
	var logs bytes.Buffer
	raiseSysctl(path, before+1, slog.New(slog.NewTextHandler(&logs, nil)))
	if after, _ := readSysctl(path); after != before {
		t.Fatalf("%s: %d, was %d", path, after, before)
	}
	if !strings.Contains(logs.String(), "could not raise") {
		t.Fatalf("logs %q", logs.String())
	}
}

// TestRaisePidMax raises the host's kernel.pid_max as a node's start does
// (a host at the kernel's default of 32,768 holds some 3,500 idle
// sandboxes' threads, one at the limit 128 times as many).
func TestRaisePidMax(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (writes kernel.pid_max)")
	}
	var logs bytes.Buffer
	RaisePidMax(slog.New(slog.NewTextHandler(&logs, nil)))
	got, err := readSysctl(pidMaxPath)
	if err != nil {
		t.Fatal(err)
	}
	if got < PidMaxLimit {
		t.Fatalf("kernel.pid_max %d after RaisePidMax, want at least %d (logs: %s)", got, PidMaxLimit, logs.String())
	}
}
