package guest

import (
	"os"

	"golang.org/x/sys/unix"
)

// writebackEvery is how much of an upload is written before its writeback
// is started.
const writebackEvery = 8 << 20

// appender writes to a new file in order and starts writing its pages to
// the disk every writebackEvery bytes (sync_file_range, without waiting),
// so the fsync that ends an upload waits for the last few MiB rather than
// for all of them: the disk works while the body is still coming. It
// changes nothing of what is durable when: only the fsync promises that.
type appender struct {
	f       *os.File
	off     int64 // bytes written
	started int64 // bytes whose writeback was started
}

func (a *appender) Write(p []byte) (int, error) {
	n, err := a.f.Write(p)
	a.off += int64(n)
	if a.off-a.started >= writebackEvery {
		// Best effort: where it does nothing, fsync does all the work.
		unix.SyncFileRange(int(a.f.Fd()), a.started, a.off-a.started, unix.SYNC_FILE_RANGE_WRITE)
		a.started = a.off
	}
	return n, err
}
