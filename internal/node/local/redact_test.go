package local

import (
	"encoding/json"
	"os"
	"path/filepath"
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

// TestRedactingTerminalFlush checks that a terminal's held output goes
// out on its own once ptyFlushDelay has passed since the output that kept
// it held, while it is a short part of a value; that a longer part stays
// held however long the pause, till more output or the exit; that
// matching goes on across that; and that a pipe's waits for more. Times
// are given to release, not waited for.
func TestRedactingTerminalFlush(t *testing.T) {
	const value = "tok-0123456789abcdef"
	start := func(t *testing.T, pty bool) (*output.Log, func(seq int64, data string)) {
		l, err := output.Open(t.TempDir(), 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		set := &secretSet{}
		set.add([]node.Secret{{Name: "tok", Value: value}})
		w := newRedacting(l, set, pty)
		now := time.Now()
		return l, func(seq int64, data string) {
			t.Helper()
			if seq < 0 { // a pause of -seq tenths of the delay
				now = now.Add(time.Duration(-seq) * ptyFlushDelay / 10)
				if _, err := w.release(now); err != nil {
					t.Fatal(err)
				}
				return
			}
			kind := wire.FrameStdout
			if data == "exit" {
				exit, _ := json.Marshal(node.Exit{})
				kind, data = wire.FrameExit, string(exit)
			}
			if err := w.frame(wire.Frame{Seq: seq, Kind: kind, Data: []byte(data)}); err != nil {
				t.Fatal(err)
			}
			w.mu.Lock()
			w.due = now.Add(ptyFlushDelay) // as frame set it, on the test's clock
			w.mu.Unlock()
		}
	}
	t.Run("prompt shows after the delay", func(t *testing.T) {
		l, feed := start(t, true)
		feed(1, "$ to")
		if got, _ := readAll(t, l); got != "$ " {
			t.Fatalf("at once %q; want the prompt without what may begin a secret", got)
		}
		feed(-5, "")
		if got, _ := readAll(t, l); got != "$ " {
			t.Fatalf("before the delay %q", got)
		}
		feed(-6, "")
		if got, _ := readAll(t, l); got != "$ to" {
			t.Fatalf("after the delay %q", got)
		}
		// Matching went on: the rest of the value is hidden.
		feed(2, "k-0123456789abcdef\n")
		if got, _ := readAll(t, l); got != "$ to[secret:tok]\n" {
			t.Errorf("after the flush: %q", got)
		}
	})
	t.Run("a long part of a value waits however long the pause", func(t *testing.T) {
		l, feed := start(t, true)
		feed(1, "$ "+value[:len(value)-1])
		for range 100 {
			feed(-10, "")
		}
		if got, _ := readAll(t, l); got != "$ " {
			t.Fatalf("after a hundred delays %q", got)
		}
		feed(2, value[len(value)-1:]+"\n")
		if got, _ := readAll(t, l); got != "$ [secret:tok]\n" || rawStdout(t, l) != got {
			t.Errorf("recorded %q (raw %q)", got, rawStdout(t, l))
		}
	})
	t.Run("a long part that never completes goes out at the exit", func(t *testing.T) {
		l, feed := start(t, true)
		feed(1, "$ tok-")
		feed(-30, "")
		if got, _ := readAll(t, l); got != "$ " {
			t.Fatalf("after the delay %q", got)
		}
		feed(2, "exit")
		if got, _ := readAll(t, l); got != "$ tok-" {
			t.Errorf("after the exit %q", got)
		}
	})
	t.Run("pieces with pauses under the delay", func(t *testing.T) {
		l, feed := start(t, true)
		feed(1, "abc")
		feed(-9, "")
		feed(2, "tok-012")
		feed(-9, "")
		feed(3, "3456789a")
		feed(-9, "")
		feed(4, "bcdef\n")
		got, _ := readAll(t, l)
		if got != "abc[secret:tok]\n" || rawStdout(t, l) != got {
			t.Errorf("recorded %q (raw %q)", got, rawStdout(t, l))
		}
	})
	t.Run("a pipe waits", func(t *testing.T) {
		l, feed := start(t, false)
		feed(1, "$ tok-")
		feed(-30, "")
		if got, _ := readAll(t, l); got != "$ " {
			t.Errorf("a pipe let out %q", got)
		}
	})
}

// TestRedactingAcrossStreams checks values split between stdout and
// stderr, and a value on one stream with the other's output between its
// pieces.
func TestRedactingAcrossStreams(t *testing.T) {
	const value = "tok-0123456789abcdef"
	l, err := output.Open(t.TempDir(), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	set := &secretSet{}
	set.add([]node.Secret{{Name: "tok", Value: value}})
	w := newRedacting(l, set, false)
	seq := int64(0)
	feed := func(kind byte, data string) {
		t.Helper()
		seq++
		if err := w.frame(wire.Frame{Seq: seq, Kind: kind, Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	feed(wire.FrameStdout, "a tok-0123")
	feed(wire.FrameStderr, "456789abcdef b\n")
	feed(wire.FrameStdout, "c tok-01234567")
	feed(wire.FrameStderr, "noise\n")
	feed(wire.FrameStdout, "89abcdef d\n")
	feed(wire.FrameStderr, "tok-0")
	feed(wire.FrameStdout, "123456789abcde")
	feed(wire.FrameStderr, "f e\n")
	exit, _ := json.Marshal(node.Exit{})
	feed(wire.FrameExit, string(exit))

	var all strings.Builder
	streams := map[string]*strings.Builder{"stdout": {}, "stderr": {}}
	var seqs []int64
	if _, err := l.Read(t.Context(), 0, false, func(c node.Chunk) error {
		seqs = append(seqs, c.Seq)
		all.Write(c.Data)
		streams[c.Stream].Write(c.Data)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := "a [secret:tok] b\nc noise\n[secret:tok] d\n[secret:tok] e\n"; all.String() != want {
		t.Errorf("interleaved:\n%q\nwant\n%q", all.String(), want)
	}
	if want := "a [secret:tok]c [secret:tok] d\n"; streams["stdout"].String() != want {
		t.Errorf("stdout %q, want %q", streams["stdout"].String(), want)
	}
	if want := " b\nnoise\n[secret:tok] e\n"; streams["stderr"].String() != want {
		t.Errorf("stderr %q, want %q", streams["stderr"].String(), want)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Errorf("seqs do not increase: %v", seqs)
		}
	}
	for _, name := range []string{"stdout", "stderr"} {
		ra, n, err := l.Stream(name)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, n)
		ra.ReadAt(b, 0)
		if strings.Contains(string(b), "0123") {
			t.Errorf("raw %s holds part of the value: %q", name, b)
		}
	}
}

// TestPTYMarker: a terminal command's mark is found beside its log, and
// in the directory of a log of an earlier version; an unmarked command's
// is not.
func TestPTYMarker(t *testing.T) {
	dir := t.TempDir()
	flat, old, plain := filepath.Join(dir, "cmd_1"), filepath.Join(dir, "cmd_2"), filepath.Join(dir, "cmd_3")
	if err := os.Mkdir(old, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{flat, old} {
		if err := markPTY(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(old, ptyMarker)); err != nil {
		t.Errorf("earlier layout: %v", err)
	}
	for p, want := range map[string]bool{flat: true, old: true, plain: false} {
		if got := isPTY(p); got != want {
			t.Errorf("isPTY(%s) = %v, want %v", filepath.Base(p), got, want)
		}
	}
}

// BenchmarkRedactingFrame records 64 KiB frames of a sandbox given no
// secret, the common case of every command's output.
func BenchmarkRedactingFrame(b *testing.B) {
	l, err := output.Open(filepath.Join(b.TempDir(), "cmd"), 1<<40, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	w := newRedacting(l, &secretSet{}, false)
	data := make([]byte, wire.MaxFrameData)
	b.SetBytes(int64(len(data)))
	for i := range b.N {
		if err := w.frame(wire.Frame{Seq: int64(i + 1), Kind: wire.FrameStdout, Data: data}); err != nil {
			b.Fatal(err)
		}
	}
}
