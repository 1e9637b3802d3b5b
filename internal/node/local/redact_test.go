package local

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/output"
)

func readAll(t *testing.T, l *output.Log) (stdout string, seqs []int64) {
	t.Helper()
	var b strings.Builder
	if _, err := l.Read(t.Context(), 0, false, func(c node.Chunk) error {
		seqs = append(seqs, c.Seq)
		if c.Stream == "stdout" {
			b.Write(c.Data)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return b.String(), seqs
}

func rawStdout(t *testing.T, l *output.Log) string {
	t.Helper()
	ra, n, err := l.Stream("stdout")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	if _, err := ra.ReadAt(b, 0); err != nil && n > 0 {
		t.Fatal(err)
	}
	return string(b)
}

func TestRedactingRecorder(t *testing.T) {
	const value = "tok-0123456789abcdef"
	l, err := output.Open(t.TempDir(), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	set := &secretSet{}
	w := newRedacting(l, set, false)
	feed := func(seq int64, kind byte, data string) {
		t.Helper()
		if err := w.frame(wire.Frame{Seq: seq, Kind: kind, Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	feed(1, wire.FrameStdout, "before any secret: "+value+"\n") // not given yet: kept
	set.add([]node.Secret{{Name: "tok", Value: value}, {Name: "pin", Value: "1234"}})
	feed(2, wire.FrameStdout, "whole "+value+"\n")
	feed(3, wire.FrameStdout, "split tok-0123") // all but "split " held
	feed(4, wire.FrameStderr, "meanwhile\n")
	feed(3, wire.FrameStdout, "tok-0123") // a resent frame is ignored
	feed(5, wire.FrameStdout, "456789abcdef pin 1234\n")
	feed(6, wire.FrameStdout, "ends with tok-01")
	exit, _ := json.Marshal(node.Exit{})
	feed(7, wire.FrameExit, string(exit))

	want := "before any secret: " + value + "\nwhole [secret:tok]\nsplit [secret:tok] pin 1234\nends with tok-01"
	got, seqs := readAll(t, l)
	if got != want {
		t.Errorf("read back:\n%q\nwant\n%q", got, want)
	}
	if raw := rawStdout(t, l); raw != want {
		t.Errorf("raw stdout:\n%q\nwant\n%q", raw, want)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Errorf("seqs do not increase: %v", seqs)
		}
	}
	if l.Exit() == nil {
		t.Error("no exit recorded")
	}
}

// TestRedactingTerminalFlush checks that a terminal's held output goes out
// on its own within the flush delay, and a pipe's waits for more.
func TestRedactingTerminalFlush(t *testing.T) {
	for _, pty := range []bool{true, false} {
		l, err := output.Open(t.TempDir(), 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		set := &secretSet{}
		set.add([]node.Secret{{Name: "tok", Value: "tok-0123456789abcdef"}})
		w := newRedacting(l, set, pty)
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.flushTerminal(ctx)
		}()
		if err := w.frame(wire.Frame{Seq: 1, Kind: wire.FrameStdout, Data: []byte("$ tok-")}); err != nil {
			t.Fatal(err)
		}
		got, _ := readAll(t, l)
		if got != "$ " {
			t.Fatalf("pty %v: at once %q; want the prompt without what may begin a secret", pty, got)
		}
		time.Sleep(3 * ptyFlushDelay)
		got, _ = readAll(t, l)
		if want := map[bool]string{true: "$ tok-", false: "$ "}[pty]; got != want {
			t.Errorf("pty %v: after the delay %q; want %q", pty, got, want)
		}
		if pty {
			// What was let out cannot be taken back: the rest shows as it is.
			w.frame(wire.Frame{Seq: 2, Kind: wire.FrameStdout, Data: []byte("0123456789abcdef\n")})
			if got, _ = readAll(t, l); got != "$ tok-0123456789abcdef\n" {
				t.Errorf("after the flush: %q", got)
			}
		}
		stop()
		<-done
		l.Close()
	}
}
