package output

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/node"
)

// logPath is where a test's log is made: a name in a directory of its own.
func logPath(t *testing.T) string { return filepath.Join(t.TempDir(), "cmd_1") }

func frame(kind byte, seq int64, data string) wire.Frame {
	return wire.Frame{Kind: kind, Seq: seq, Data: []byte(data)}
}

func exitFrame(t *testing.T, seq int64, code int) wire.Frame {
	t.Helper()
	b, err := json.Marshal(Exit{ExitCode: code})
	if err != nil {
		t.Fatal(err)
	}
	return wire.Frame{Kind: wire.FrameExit, Seq: seq, Data: b}
}

func collect(t *testing.T, l *Log, after int64) (string, *Exit) {
	t.Helper()
	var b bytes.Buffer
	exit, err := l.Read(t.Context(), after, false, func(c Chunk) error {
		if c.Truncated {
			b.WriteString("[truncated]")
			return nil
		}
		b.WriteString(c.Stream[:3] + ":" + string(c.Data) + ";")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String(), exit
}

func TestAppendRead(t *testing.T) {
	l, err := Open(logPath(t), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, f := range []wire.Frame{
		frame(wire.FrameStdout, 1, "a"),
		frame(wire.FrameStderr, 2, "b"),
		frame(wire.FrameStdout, 3, "c"),
		frame(wire.FrameStdout, 2, "duplicate"), // resumed stream: ignored
		exitFrame(t, 4, 3),
	} {
		if err := l.Append(f); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		after int64
		want  string
	}{
		{0, "std:a;std:b;std:c;"},
		{1, "std:b;std:c;"},
		{3, ""},
		{99, ""},
	}
	for _, tt := range tests {
		got, exit := collect(t, l, tt.after)
		if got != tt.want {
			t.Errorf("after %d: got %q, want %q", tt.after, got, tt.want)
		}
		if exit == nil || exit.ExitCode != 3 {
			t.Errorf("after %d: exit = %+v, want code 3", tt.after, exit)
		}
	}
	if out, errb := l.Sizes(); out != 2 || errb != 1 {
		t.Errorf("sizes = %d, %d; want 2, 1", out, errb)
	}
}

func TestCapStopsRecording(t *testing.T) {
	// "abc" and its record, and room for the marker's record.
	l, err := Open(logPath(t), 3+2*recordSize+4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i, d := range []string{"abc", "de", "f"} {
		if err := l.Append(frame(wire.FrameStdout, int64(i+1), d)); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := collect(t, l, 0)
	if want := "std:abc;[truncated]"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if l.ResumeSeq() != 3 {
		t.Errorf("ResumeSeq = %d, want 3 (frames past the cap are still acknowledged)", l.ResumeSeq())
	}
}

func TestReopenRepairsTornWrites(t *testing.T) {
	dir := logPath(t)
	l, err := Open(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Append(frame(wire.FrameStdout, 1, "hello "))
	l.Append(frame(wire.FrameStdout, 2, "world"))
	l.Close()
	// A crash after data was written but before its index record was whole.
	appendBytes(t, dir+".stdout", "junk")
	appendBytes(t, dir+".index", "0123456789")

	l, err = Open(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.LastSeq() != 2 {
		t.Fatalf("LastSeq = %d, want 2", l.LastSeq())
	}
	if err := l.Append(frame(wire.FrameStdout, 3, "!")); err != nil {
		t.Fatal(err)
	}
	got, exit := collect(t, l, 0)
	if want := "std:hello world!;"; got != want { // recorded already: one chunk
		t.Errorf("got %q, want %q", got, want)
	}
	if exit != nil {
		t.Errorf("exit = %+v, want none yet", exit)
	}
	b, _ := os.ReadFile(dir + ".stdout")
	if string(b) != "hello world!" {
		t.Errorf("stdout file = %q", b)
	}
}

func appendBytes(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestFollowWaitsForMore(t *testing.T) {
	l, err := Open(logPath(t), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	done := make(chan string)
	go func() {
		var b bytes.Buffer
		_, err := l.Read(ctx, 0, true, func(c Chunk) error { b.Write(c.Data); return nil })
		if err != nil {
			b.WriteString("error: " + err.Error())
		}
		done <- b.String()
	}()
	for i := int64(1); i <= 3; i++ {
		time.Sleep(10 * time.Millisecond)
		l.Append(frame(wire.FrameStdout, i, "x"))
	}
	l.Append(exitFrame(t, 4, 0))
	if got := <-done; got != "xxx" {
		t.Errorf("followed %q, want xxx", got)
	}
}

// diskBytes is what a log takes on disk: its streams and its index.
func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	for _, name := range []string{"stdout", "stderr", "index"} {
		st, err := os.Stat(dir + "." + name)
		if errors.Is(err, fs.ErrNotExist) && name != "index" {
			continue // a stream that recorded nothing
		}
		if err != nil {
			t.Fatal(err)
		}
		n += st.Size()
	}
	return n
}

// TestBudgetCountsTheIndex appends two million one-byte frames under a
// 1 MiB budget: an index record per byte would grow the index to 48 MiB
// if only stream bytes were counted.
func TestBudgetCountsTheIndex(t *testing.T) {
	tests := []struct {
		name     string
		maxBytes int64 // the log's own cap
		budget   int64 // shared by two logs; 0 for none
	}{
		{"log cap", 1 << 20, 0},
		{"shared budget", 1 << 40, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b *Budget
			if tt.budget > 0 {
				b = NewBudget(tt.budget, 0)
			}
			dirs := []string{logPath(t), logPath(t)}
			var logs []*Log
			for _, d := range dirs {
				l, err := Open(d, tt.maxBytes, b)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				logs = append(logs, l)
			}
			for i := int64(1); i <= 2_000_000; i++ {
				if err := logs[i%2].Append(frame(wire.FrameStdout, i, "x")); err != nil {
					t.Fatal(err)
				}
			}
			total := diskBytes(t, dirs[0]) + diskBytes(t, dirs[1])
			limit := 2 * tt.maxBytes
			if b != nil {
				// Each log may add its marker record past a spent budget.
				limit = tt.budget + 2*recordSize
				if b.Used() > tt.budget {
					t.Errorf("budget used %d of %d", b.Used(), tt.budget)
				}
			}
			if total > limit {
				t.Fatalf("two logs take %d bytes on disk, index included; the limit is %d", total, limit)
			}
			for _, l := range logs {
				got, _ := collect(t, l, 1_999_990)
				if got != "" {
					t.Errorf("frames past the limit were recorded: %q", got)
				}
				if !l.capped {
					t.Error("no truncation marker")
				}
			}
		})
	}
}

// TestSilentCommandMakesNoStreamFiles: a command that writes nothing
// leaves only its index (with the exit in it) and still reads back, from
// the log held open and after reopening it.
func TestSilentCommandMakesNoStreamFiles(t *testing.T) {
	dir := logPath(t)
	l, err := Open(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(exitFrame(t, 1, 7)); err != nil {
		t.Fatal(err)
	}
	check := func(l *Log) {
		t.Helper()
		got, exit := collect(t, l, 0)
		if got != "" || exit == nil || exit.ExitCode != 7 {
			t.Errorf("read %q, exit %+v; want nothing and exit 7", got, exit)
		}
		if l.LastSeq() != 1 || l.ResumeSeq() != 1 {
			t.Errorf("LastSeq %d, ResumeSeq %d; want 1, 1", l.LastSeq(), l.ResumeSeq())
		}
		for _, name := range []string{"stdout", "stderr"} {
			r, size, err := l.Stream(name)
			if err != nil || size != 0 {
				t.Fatalf("Stream(%s) = %d, %v", name, size, err)
			}
			if n, err := r.ReadAt(make([]byte, 1), 0); n != 0 || err != io.EOF {
				t.Errorf("empty %s read %d, %v", name, n, err)
			}
		}
	}
	check(l)
	l.Close()
	entries, err := os.ReadDir(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := filepath.Base(dir) + ".index"; len(names) != 1 || names[0] != want {
		t.Errorf("files = %v, want only %s", names, want)
	}
	l, err = OpenExisting(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	check(l)
	if err := l.Append(frame(wire.FrameStdout, 2, "late")); err != nil {
		t.Fatal(err)
	}
	if got, _ := collect(t, l, 0); got != "" {
		t.Errorf("recorded %q after the exit", got)
	}
}

// TestOneStreamMakesOneFile: only the stream written to gets a file.
func TestOneStreamMakesOneFile(t *testing.T) {
	dir := logPath(t)
	l, err := Open(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Append(frame(wire.FrameStderr, 1, "oops"))
	l.Append(exitFrame(t, 2, 1))
	l.Close()
	if _, err := os.Stat(dir + ".stdout"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stdout: %v, want none", err)
	}
	l, err = OpenExisting(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, exit := collect(t, l, 0)
	if got != "std:oops;" || exit == nil || exit.ExitCode != 1 {
		t.Errorf("read %q, exit %+v", got, exit)
	}
}

// TestTornExitIsNotAnExit: an exit cut short by a crash (part of its JSON
// written, or all of it but not its record) is no exit: the records before
// it read, the log is open to the exit again, and it records whole.
func TestTornExitIsNotAnExit(t *testing.T) {
	for _, keep := range []int{1, recordSize, 2*recordSize - 1, -1, -recordSize} {
		dir := logPath(t)
		l, err := Open(dir, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Append(frame(wire.FrameStdout, 1, "a"))
		l.Append(frame(wire.FrameStdout, 2, "b"))
		l.Append(exitFrame(t, 3, 5))
		l.Close()
		index := dir + ".index"
		st, err := os.Stat(index)
		if err != nil {
			t.Fatal(err)
		}
		size := int64(2*recordSize + keep)
		if keep < 0 {
			size = st.Size() + int64(keep) // the exit's record cut
		}
		if err := os.Truncate(index, size); err != nil {
			t.Fatal(err)
		}
		l, err = OpenExisting(dir, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, exit := collect(t, l, 0); got != "std:ab;" || exit != nil {
			t.Errorf("keep %d: read %q, exit %+v; want both chunks and no exit", keep, got, exit)
		}
		if l.ResumeSeq() != 2 {
			t.Errorf("keep %d: ResumeSeq %d, want 2", keep, l.ResumeSeq())
		}
		if err := l.Append(exitFrame(t, 3, 5)); err != nil {
			t.Fatal(err)
		}
		l.Close()
		l, err = OpenExisting(dir, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, exit := collect(t, l, 0); got != "std:ab;" || exit == nil || exit.ExitCode != 5 {
			t.Errorf("keep %d: after the exit again: read %q, exit %+v", keep, got, exit)
		}
		l.Close()
	}
}

// TestEarlierLayoutReads: a log as earlier versions wrote it (all three
// files made at the start, an empty stream among them, the exit in
// exit.json) reads, replays from any point and reopens as it was.
func TestEarlierLayoutReads(t *testing.T) {
	dir := t.TempDir()
	var index []byte
	rec := func(seq int64, kind byte, off int64, n uint32) {
		var b [recordSize]byte
		encodeRecord(b[:], seq, kind, 0, off, n)
		index = append(index, b[:]...)
	}
	rec(1, kindStdout, 0, 6)
	rec(2, kindSkip, 0, 0)
	rec(3, kindStdout, 6, 5)
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("stdout", "hello world")
	write("stderr", "")
	write("index", string(index))
	write("exit.json", `{"exit_code":4,"seq":4}`)
	for range 2 {
		l, err := OpenExisting(dir, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, exit := collect(t, l, 0); got != "std:hello world;" || exit == nil || exit.ExitCode != 4 {
			t.Errorf("read %q, exit %+v", got, exit)
		}
		if got, _ := collect(t, l, 1); got != "std:world;" {
			t.Errorf("after 1: read %q", got)
		}
		if l.LastSeq() != 4 || l.ResumeSeq() != 4 {
			t.Errorf("LastSeq %d, ResumeSeq %d; want 4, 4", l.LastSeq(), l.ResumeSeq())
		}
		if out, errb := l.Sizes(); out != 11 || errb != 0 {
			t.Errorf("sizes %d, %d", out, errb)
		}
		l.Close()
	}
	// Running when the node stopped: no exit.json yet; the exit that
	// comes now is recorded the new way and read with the old records.
	os.Remove(filepath.Join(dir, "exit.json"))
	l, err := Open(dir, 1<<20, nil) // as the node reattaching it does
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(frame(wire.FrameStderr, 4, "!")); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(exitFrame(t, 5, 0)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, err = OpenExisting(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got, exit := collect(t, l, 0); got != "std:hello world;std:!;" || exit == nil || exit.ExitCode != 0 {
		t.Errorf("read %q, exit %+v", got, exit)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "stderr")); err != nil || string(b) != "!" {
		t.Errorf("stderr in the log's directory: %q, %v", b, err)
	}
	if _, err := os.Stat(dir + ".index"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a log of the new layout was made beside the earlier one: %v", err)
	}
}

// TestLostExitReadsBackLost: the exit the node writes for a command lost
// with its sandbox reads back lost after a reopen (as after a restart),
// so the command is not reported exited.
func TestLostExitReadsBackLost(t *testing.T) {
	path := logPath(t)
	l, err := Open(path, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.End(node.Exit{ExitCode: -1, Lost: true}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, err = OpenExisting(path, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if e := l.Exit(); e == nil || !e.Lost || e.ExitCode != -1 {
		t.Fatalf("exit read back: %+v; want lost", e)
	}
}

// TestFullDiskRefusesANewLog: a new log takes its first block at once, so
// a disk with inodes left but no blocks refuses it, leaving no file.
func TestFullDiskRefusesANewLog(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount)")
	}
	dir := t.TempDir()
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).Run(); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	defer exec.Command("umount", dir).Run()
	fill, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := fill.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	fill.Close()
	path := filepath.Join(dir, "sbx", "cmd_1")
	os.MkdirAll(filepath.Dir(path), 0o700) // a directory may still fit: an inode
	if l, err := Open(path, 1<<20, nil); err == nil {
		l.Close()
		t.Fatal("a new log on a full disk opened")
	}
	if _, err := os.Lstat(path + ".index"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused log left its index: %v", err)
	}
}
