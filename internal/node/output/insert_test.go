package output

import (
	"testing"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// seqs lists the sequence numbers readers see after after.
func seqs(t *testing.T, l *Log, after int64) []int64 {
	t.Helper()
	var out []int64
	if _, err := l.Read(t.Context(), after, false, func(c Chunk) error {
		out = append(out, c.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInsertAndSkip records what a redacting recorder does: frames whose
// data was all held back (skips), held data let out later (inserts), and
// checks what readers see, where the agent's stream resumes, and that
// both survive a reopen.
func TestInsertAndSkip(t *testing.T) {
	dir := logPath(t)
	l, err := Open(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(l.Append(frame(wire.FrameStdout, 1, "a")))
	must(l.Append(frame(wire.FrameStdout, 2, ""))) // all held back
	if l.LastSeq() != 1 || l.ResumeSeq() != 2 {
		t.Fatalf("after a skip: LastSeq %d, ResumeSeq %d; want 1, 2", l.LastSeq(), l.ResumeSeq())
	}
	if ok, err := l.Insert(wire.FrameStdout, []byte("held")); !ok || err != nil {
		t.Fatalf("Insert = %v, %v", ok, err)
	}
	if l.LastSeq() != 3 || l.ResumeSeq() != 2 {
		t.Fatalf("after an insert: LastSeq %d, ResumeSeq %d; want 3, 2", l.LastSeq(), l.ResumeSeq())
	}
	must(l.Append(frame(wire.FrameStdout, 2, "dup"))) // a resent frame
	must(l.Append(frame(wire.FrameStderr, 3, "b")))
	if got, _ := collect(t, l, 0); got != "std:aheld;std:b;" { // a and held are one chunk now

		t.Fatalf("read %q", got)
	}
	if got := seqs(t, l, 0); len(got) != 2 || got[0] != 3 || got[1] != 4 {
		t.Fatalf("seqs %v; want [3 4]", got)
	}
	if got, _ := collect(t, l, 1); got != "std:held;std:b;" {
		t.Fatalf("read after 1: %q", got)
	}
	must(l.Close())

	l, err = OpenExisting(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.LastSeq() != 4 || l.ResumeSeq() != 3 {
		t.Fatalf("reopened: LastSeq %d, ResumeSeq %d; want 4, 3", l.LastSeq(), l.ResumeSeq())
	}
	must(l.Append(frame(wire.FrameStdout, 4, "")))
	must(l.Close())
	l, err = OpenExisting(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.LastSeq() != 4 || l.ResumeSeq() != 4 {
		t.Fatalf("reopened after a skip: LastSeq %d, ResumeSeq %d; want 4, 4", l.LastSeq(), l.ResumeSeq())
	}
	must(l.Append(exitFrame(t, 5, 0)))
	got, exit := collect(t, l, 0)
	if got != "std:aheld;std:b;" || exit == nil || l.LastSeq() != 6 {
		t.Fatalf("read %q, exit %v, LastSeq %d; want the exit at 6", got, exit, l.LastSeq())
	}
	if ok, _ := l.Insert(wire.FrameStdout, []byte("late")); ok {
		t.Error("Insert after the exit recorded")
	}
}
