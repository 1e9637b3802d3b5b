package saves

import (
	"os"

	"golang.org/x/sys/unix"
)

// writebackEvery is how much is written to a file before its writeback
// is started.
const writebackEvery = 8 << 20

// writeback starts writing a file's pages to its disk as they are
// written, so that the fsync that ends a save or a restore waits for the
// last few MiB rather than for all of them: the disk works while the
// archive is still being made. It changes nothing of what is durable
// when: only the fsync promises that.
type writeback struct {
	f         *os.File
	from, end int64 // the range written and not yet handed to the disk
}

// written notes that [off, off+n) was written, and starts the writeback
// of the range written since the last start once it reaches
// writebackEvery, or when a write is not next to it.
func (w *writeback) written(off, n int64) {
	if off != w.end {
		w.start()
		w.from = off
	}
	w.end = off + n
	if w.end-w.from >= writebackEvery {
		w.start()
	}
}

// start hands the pending range to the disk, without waiting. It is best
// effort: where it does nothing, fsync does all the work, as before.
func (w *writeback) start() {
	if w.end > w.from {
		unix.SyncFileRange(int(w.f.Fd()), w.from, w.end-w.from, unix.SYNC_FILE_RANGE_WRITE)
	}
	w.from = w.end
}

// appender writes to f in order, starting writeback as it goes.
type appender struct {
	wb  writeback
	off int64
}

func newAppender(f *os.File) *appender { return &appender{wb: writeback{f: f}} }

func (a *appender) Write(p []byte) (int, error) {
	n, err := a.wb.f.Write(p)
	a.wb.written(a.off, int64(n))
	a.off += int64(n)
	return n, err
}
