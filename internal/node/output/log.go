// Package output records a command's output on the node: append-only, with
// one sequence over both streams, bounded in size, and readable from any
// point while it grows.
//
// A log is named by a path P and is up to three files beside each other,
// no directory of its own: "P.stdout" and "P.stderr" hold the raw bytes
// of each stream, each made when its stream first records something (a
// command that writes nothing has neither); "P.index" holds
// one fixed-size record per chunk (seq, kind, offset in its stream file,
// length), and, once the command ends, its exit after the last record: the
// exit's JSON, then a record of kind exit naming its length and checksum,
// written at once. Data is written before its index record, so a crash
// leaves at worst bytes that no record names; Open cuts them off, with an
// exit whose checksum does not match (it was cut short).
//
// Logs of earlier versions were a directory P holding "stdout", "stderr"
// and "index", all made at the start, and the exit in a file of its own,
// "exit.json"; they still read, and one still recording goes on so.
//
// Sequence numbers are the agent's, plus the number of records the node
// inserted before (Insert: output the node held back, such as the start
// of what may be a secret, let out later). Each record keeps that count,
// so the agent's own sequence, where the recorder resumes, is known after
// a restart. A frame that left nothing to record (all held back) still
// gets a skip record, which readers never see, for the same reason.
package output

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/node"
)

// Record kinds in the index.
const (
	kindStdout    byte = 1
	kindStderr    byte = 2
	kindTruncated byte = 3 // recording stopped at the cap; the command ran on
	kindSkip      byte = 4 // a frame with nothing to record; readers skip it
	kindExit      byte = 5 // the last thing in the index, after the exit's JSON
)

const recordSize = 24 // seq 8, kind 1, inserted 3, offset 8, length 4

// maxInserted is how many records Insert may add to one log: the count
// is kept in 3 bytes of each record.
const maxInserted = 1<<24 - 1

// Exit is how a command ended, as recorded.
type Exit = node.Exit

// Chunk is one recorded record as read back.
type Chunk = node.Chunk

var _ node.Output = (*Log)(nil)

// Log is one command's recorded output. Its methods are safe for concurrent
// use: one writer appends while any number of readers follow.
type Log struct {
	base     string // the path that names the log
	flat     bool   // files beside each other at base.*; else, an earlier version's, in a directory at base
	maxBytes int64
	budget   *Budget // nil: none beyond maxBytes
	spares   *Spares // where its new files come from; nil: created

	index *os.File // set at open, never changed

	mu      sync.Mutex
	streams [2]*os.File // stdout, stderr; nil until the stream records something
	lastSeq int64       // of the last chunk or exit readers see
	lastAny int64       // of the last record of any kind, or the exit
	ins     int64       // records inserted by Insert
	records int64
	sizes   [2]int64 // bytes in stdout, stderr
	capped  bool
	exit    *Exit
	changed chan struct{} // closed and replaced on every change
	closed  bool
}

// Budget is what a set of logs (one sandbox's commands) may record
// together: stream bytes and index records alike. Logs charge it as they
// record; what is over it is not recorded, as past a log's own cap.
type Budget struct {
	limit int64
	used  atomic.Int64
}

// NewBudget returns a budget of limit bytes of which used are spent.
func NewBudget(limit, used int64) *Budget {
	b := &Budget{limit: limit}
	b.used.Store(used)
	return b
}

// Used is what the logs have recorded against the budget.
func (b *Budget) Used() int64 { return b.used.Load() }

// take charges n bytes if they fit.
func (b *Budget) take(n int64) bool {
	if b == nil {
		return true
	}
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// Open opens the log at path, creating it if needed (and the directory
// that holds it), and repairs what a crash may have left half-written.
// maxBytes caps what it records: the stream bytes and the index together.
// budget, when not nil, is shared with other logs and charged too.
// A log that cannot be made (its disk is full) leaves no file behind.
func Open(path string, maxBytes int64, budget *Budget) (*Log, error) {
	return (*Spares)(nil).Open(path, maxBytes, budget)
}

// Open is output.Open with the log's new files taken from s.
func (s *Spares) Open(path string, maxBytes int64, budget *Budget) (*Log, error) {
	if isDir(path) {
		return open(path, false, maxBytes, budget) // an earlier version's
	}
	l, err := create(s, path, maxBytes, budget)
	if errors.Is(err, fs.ErrExist) {
		// There already (a start tried again): opened and repaired.
		l, err = open(path, true, maxBytes, budget)
	}
	if l != nil {
		l.spares = s
	}
	return l, err
}

// create makes a new log at path: a new command's, the most common
// case, in three system calls where opening one that may exist and
// repairing it takes a dozen. It fails with an error matching
// fs.ErrExist when the log is there already.
func create(spares *Spares, path string, maxBytes int64, budget *Budget) (*Log, error) {
	name := path + ".index"
	index, err := spares.create(name)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("create output dir: %w", err)
		}
		index, err = spares.create(name)
	}
	if errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("open output log %s: %w", path, err)
	}
	// An empty file takes an inode but no block, so a full disk would
	// let the command start with nowhere to record: the index's first
	// block is taken now, and a full disk refuses the command before it
	// runs.
	if err := unix.Fallocate(int(index.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, firstBlock); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		index.Close()
		os.Remove(name)
		return nil, fmt.Errorf("open output log %s: %w", path, err)
	}
	return &Log{base: path, flat: true, maxBytes: maxBytes, budget: budget, index: index, changed: make(chan struct{})}, nil
}

// firstBlock is how much of a new log's index is allocated up front.
const firstBlock = 4096

// OpenExisting opens a log that was recorded before; it creates nothing
// and fails with an error matching fs.ErrNotExist when the log is gone.
func OpenExisting(path string, maxBytes int64, budget *Budget) (*Log, error) {
	flat := !isDir(path)
	l := &Log{base: path, flat: flat}
	if _, err := os.Stat(l.file("index")); err != nil {
		return nil, fmt.Errorf("open output log %s: %w", path, err)
	}
	return open(path, flat, maxBytes, budget)
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// file is the name of one of the log's files: "index", "stdout",
// "stderr" or (of an earlier version's log) "exit.json".
func (l *Log) file(part string) string {
	if l.flat {
		return l.base + "." + part
	}
	return filepath.Join(l.base, part)
}

func open(path string, flat bool, maxBytes int64, budget *Budget) (*Log, error) {
	l := &Log{base: path, flat: flat, maxBytes: maxBytes, budget: budget, changed: make(chan struct{})}
	var err error
	l.index, err = os.OpenFile(l.file("index"), os.O_RDWR|os.O_CREATE, 0o600)
	for i := 0; err == nil && i < 2; i++ {
		// A stream file is there when its stream recorded something
		// (or, in a log of an earlier version, always).
		l.streams[i], err = os.OpenFile(l.file(streamNames[i]), os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			l.streams[i], err = nil, nil
		}
	}
	if err == nil {
		err = l.recover()
	}
	if err != nil {
		l.closeFiles()
		return nil, fmt.Errorf("open output log %s: %w", path, err)
	}
	return l, nil
}

var streamNames = [2]string{"stdout", "stderr"}

// recover reads the index and its exit, drops a torn last record (or
// exit) and cuts stream files back to what the index names.
func (l *Log) recover() error {
	st, err := l.index.Stat()
	if err != nil {
		return err
	}
	n, exitSeq, err := l.readExit(st.Size())
	if err != nil {
		return err
	}
	if l.exit == nil {
		if n, err = l.dropTorn(st.Size() / recordSize); err != nil {
			return err
		}
		if err := l.index.Truncate(n * recordSize); err != nil {
			return err
		}
	}
	l.records = n
	if n > 0 {
		// Sizes come from the last record of each stream.
		var rec [recordSize]byte
		found := [2]bool{}
		visible := false
		for i := n - 1; i >= 0 && !(found[0] && found[1] && visible); i-- {
			if _, err := l.index.ReadAt(rec[:], i*recordSize); err != nil {
				return err
			}
			seq, kind, off, ln := decodeRecord(rec[:])
			if i == n-1 {
				l.lastAny, l.ins = seq, decodeInserted(rec[:])
			}
			if kind != kindSkip && !visible {
				l.lastSeq, visible = seq, true
			}
			switch kind {
			case kindStdout, kindStderr:
				if !found[kind-1] {
					found[kind-1] = true
					l.sizes[kind-1] = off + int64(ln)
				}
			case kindTruncated:
				l.capped = true
			}
		}
	}
	for i, f := range l.streams {
		if f == nil {
			if l.sizes[i] > 0 {
				return fmt.Errorf("%s is missing: the index names %d bytes of it", streamNames[i], l.sizes[i])
			}
			continue
		}
		if err := f.Truncate(l.sizes[i]); err != nil {
			return err
		}
	}
	if l.exit != nil {
		l.lastSeq = max(l.lastSeq, exitSeq)
		l.lastAny = max(l.lastAny, exitSeq)
		return nil
	}
	// A log of an earlier version keeps its exit in a file of its own.
	if b, err := os.ReadFile(l.file("exit.json")); err == nil {
		var e exitFile
		if err := json.Unmarshal(b, &e); err != nil {
			return fmt.Errorf("read exit.json: %w", err)
		}
		l.exit = &e.Exit
		l.lastSeq = max(l.lastSeq, e.Seq)
		l.lastAny = max(l.lastAny, e.Seq)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// readExit reads the exit at the end of an index of size bytes, if one is
// there whole: its record names the JSON before it and its checksum. It
// returns the number of records before the exit.
func (l *Log) readExit(size int64) (records, seq int64, err error) {
	if size < recordSize {
		return 0, 0, nil
	}
	var rec [recordSize]byte
	if _, err := l.index.ReadAt(rec[:], size-recordSize); err != nil {
		return 0, 0, err
	}
	seq, kind, sum, n := decodeRecord(rec[:])
	start := size - recordSize - int64(n)
	if kind != kindExit || start < 0 || start%recordSize != 0 {
		return 0, 0, nil
	}
	b := make([]byte, n)
	if _, err := l.index.ReadAt(b, start); err != nil {
		return 0, 0, err
	}
	var e Exit
	if uint64(crc32.Checksum(b, crcTable)) != uint64(sum) || json.Unmarshal(b, &e) != nil {
		return 0, 0, nil // cut short: the command's end is not recorded
	}
	l.exit = &e
	return start / recordSize, seq, nil
}

// dropTorn returns how many of the index's first n records are whole
// records: an exit cut short leaves bytes of JSON (or zeros) whose kind
// byte is none of the records' kinds.
func (l *Log) dropTorn(n int64) (int64, error) {
	var rec [recordSize]byte
	for ; n > 0; n-- {
		if _, err := l.index.ReadAt(rec[:], (n-1)*recordSize); err != nil {
			return 0, err
		}
		if k := rec[8]; k >= kindStdout && k <= kindSkip {
			break
		}
	}
	return n, nil
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func decodeRecord(b []byte) (seq int64, kind byte, off int64, n uint32) {
	return int64(binary.BigEndian.Uint64(b[0:8])), b[8],
		int64(binary.BigEndian.Uint64(b[12:20])), binary.BigEndian.Uint32(b[20:24])
}

func decodeInserted(b []byte) int64 { return int64(b[9])<<16 | int64(b[10])<<8 | int64(b[11]) }

func encodeRecord(b []byte, seq int64, kind byte, ins int64, off int64, n uint32) {
	binary.BigEndian.PutUint64(b[0:8], uint64(seq))
	b[8] = kind
	b[9], b[10], b[11] = byte(ins>>16), byte(ins>>8), byte(ins)
	binary.BigEndian.PutUint64(b[12:20], uint64(off))
	binary.BigEndian.PutUint32(b[20:24], n)
}

// LastSeq is the sequence number of the last chunk recorded (or of the
// exit), as readers see it.
func (l *Log) LastSeq() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSeq
}

// ResumeSeq is the agent's sequence number of the last frame taken in:
// the recorder resumes the agent's stream after it.
func (l *Log) ResumeSeq() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastAny - l.ins
}

// Sizes returns the recorded bytes of stdout and stderr.
func (l *Log) Sizes() (stdout, stderr int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sizes[0], l.sizes[1]
}

// Exit returns how the command ended, or nil while it runs.
func (l *Log) Exit() *Exit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.exit
}

// Append takes in one frame from the agent. Frames at or below ResumeSeq
// were recorded already and are ignored, so a resumed stream never
// duplicates. A data frame with no data (the recorder held all of it
// back) is recorded as a skip, which readers do not see.
func (l *Log) Append(f wire.Frame) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("output log closed")
	}
	seq := f.Seq + l.ins
	if seq <= l.lastAny || l.exit != nil {
		return nil
	}
	switch f.Kind {
	case wire.FrameStdout, wire.FrameStderr:
		if err := l.appendData(seq, f.Kind, f.Data); err != nil {
			return err
		}
	case wire.FrameExit:
		var e Exit
		if err := json.Unmarshal(f.Data, &e); err != nil {
			return fmt.Errorf("%w: exit data: %v", wire.ErrBadFrame, err)
		}
		if err := l.writeExit(e, seq); err != nil {
			return err
		}
		l.lastSeq = seq
	case wire.FrameDropped:
		if err := l.appendMarker(seq); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: kind %d", wire.ErrBadFrame, f.Kind)
	}
	l.lastAny = seq
	l.notify()
	return nil
}

// Insert records data on a stream ("stdout" kind 1, "stderr" kind 2) as
// a chunk of its own, after everything recorded, between the agent's
// frames. It reports false, recording nothing, once a log has had
// maxInserted of them.
func (l *Log) Insert(kind byte, data []byte) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return false, errors.New("output log closed")
	case kind != wire.FrameStdout && kind != wire.FrameStderr:
		return false, fmt.Errorf("insert into output: kind %d", kind)
	case l.exit != nil || l.ins >= maxInserted:
		return false, nil
	case len(data) == 0:
		return true, nil
	}
	l.ins++
	seq := l.lastAny + 1
	if err := l.appendData(seq, kind, data); err != nil {
		l.ins--
		return false, err
	}
	l.lastAny = seq
	l.notify()
	return true, nil
}

// CanInsert reports whether Insert would still record.
func (l *Log) CanInsert() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.closed && l.exit == nil && l.ins < maxInserted
}

func (l *Log) appendData(seq int64, kind byte, data []byte) error {
	if l.capped {
		return nil
	}
	if len(data) == 0 {
		if err := l.writeRecord(seq, kindSkip, 0, 0); err != nil {
			return err
		}
		l.budget.take(recordSize) // the cap keeps room for the marker; skips are few
		return nil
	}
	// A chunk costs its bytes and an index record; room for the marker
	// that says recording stopped is always kept under the cap.
	cost := int64(len(data)) + recordSize
	if l.sizes[0]+l.sizes[1]+(l.records+1)*recordSize+cost > l.maxBytes || !l.budget.take(cost) {
		return l.appendMarker(seq)
	}
	i := kind - 1
	file := l.streams[i]
	if file == nil {
		name := l.file(streamNames[i])
		f, err := l.spares.create(name)
		if errors.Is(err, fs.ErrExist) {
			f, err = os.OpenFile(name, os.O_RDWR, 0)
		}
		if err != nil {
			return fmt.Errorf("record output: %w", err)
		}
		l.streams[i], file = f, f
	}
	off := l.sizes[i]
	if _, err := file.WriteAt(data, off); err != nil {
		return fmt.Errorf("record output: %w", err)
	}
	if err := l.writeRecord(seq, kind, off, uint32(len(data))); err != nil {
		return err
	}
	l.sizes[i] += int64(len(data))
	l.lastSeq = seq
	return nil
}

// appendMarker records that recording stopped. Its record fits under the
// log's own cap; against a shared budget it is charged when it fits and
// written anyway when it does not (one record per command at most).
func (l *Log) appendMarker(seq int64) error {
	if l.capped {
		return nil
	}
	l.budget.take(recordSize)
	if err := l.writeRecord(seq, kindTruncated, 0, 0); err != nil {
		return err
	}
	l.capped = true
	l.lastSeq = seq
	return nil
}

func (l *Log) writeRecord(seq int64, kind byte, off int64, n uint32) error {
	var rec [recordSize]byte
	encodeRecord(rec[:], seq, kind, l.ins, off, n)
	if _, err := l.index.WriteAt(rec[:], l.records*recordSize); err != nil {
		return fmt.Errorf("record output index: %w", err)
	}
	l.records++
	return nil
}

// exitFile is exit.json of a log of an earlier version: the exit and the
// sequence number it took.
type exitFile struct {
	node.Exit
	Seq int64 `json:"seq"`
}

// writeExit writes the exit after the index's last record, in one write:
// its JSON, padded with spaces to whole records, then a record of kind
// exit with the JSON's length and checksum and the exit's seq.
func (l *Log) writeExit(e Exit, seq int64) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if pad := len(b) % recordSize; pad != 0 {
		b = append(b, strings.Repeat(" ", recordSize-pad)...)
	}
	n := len(b)
	b = append(b, make([]byte, recordSize)...)
	encodeRecord(b[n:], seq, kindExit, l.ins, int64(crc32.Checksum(b[:n], crcTable)), uint32(n))
	if _, err := l.index.WriteAt(b, l.records*recordSize); err != nil {
		return fmt.Errorf("record exit: %w", err)
	}
	l.exit = &e
	return nil
}

// End records an exit that did not come from the agent (the command was
// lost with its sandbox). It does nothing if an exit is already recorded.
func (l *Log) End(e Exit) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.exit != nil || l.closed {
		return nil
	}
	if err := l.writeExit(e, l.lastAny+1); err != nil {
		return err
	}
	l.lastAny++ // the exit takes the next sequence number
	l.lastSeq = l.lastAny
	l.notify()
	return nil
}

func (l *Log) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// MaxChunk is the most data Read hands over in one chunk. Records that
// are already recorded when a reader reaches them (it is behind: the
// command writes faster than it reads) go out together, as one chunk of
// their bytes named by the last one's sequence number, up to this much:
// fewer, larger chunks carry the same bytes at less cost per byte. A
// reader that resumes after any sequence number it was given still gets
// every byte after it once, since a chunk's number is its last record's.
// It stays well under what a client reads as one NDJSON line (base64
// makes 4 bytes of 3).
const MaxChunk = 256 << 10

// indexBatch is how many index records Read takes in one read.
const indexBatch = 128

// Read calls fn for every chunk with Seq > after, in order. With follow it
// then waits for more until the command has ended (or ctx is done); without
// it, it stops at what is recorded now. It returns the exit when the command
// has ended and everything before it was delivered, else nil. Consecutive
// records of one stream that are all recorded already are handed over as
// one chunk (up to MaxChunk bytes) with the sequence number of the last;
// fn must not keep c.Data after it returns.
func (l *Log) Read(ctx context.Context, after int64, follow bool, fn func(Chunk) error) (*Exit, error) {
	pos, err := l.search(after)
	if err != nil {
		return nil, err
	}
	var buf []byte
	idx := make([]byte, indexBatch*recordSize)
	for {
		l.mu.Lock()
		records, exit, changed, closed, streams := l.records, l.exit, l.changed, l.closed, l.streams
		l.mu.Unlock()
		if closed {
			return nil, errors.New("output log closed")
		}
		var ir indexReader
		ir.f, ir.buf = l.index, idx
		// run is the chunk being gathered: records of one stream whose
		// bytes follow each other in its file.
		var run struct {
			kind byte
			seq  int64
			off  int64
			n    int64
		}
		emit := func() error {
			if run.kind == 0 {
				return nil
			}
			file, name := streams[run.kind-1], streamNames[run.kind-1]
			if file == nil {
				return fmt.Errorf("output record of %d bytes of %s is corrupt", run.n, name)
			}
			if int64(cap(buf)) < run.n {
				buf = make([]byte, max(run.n, wire.MaxFrameData))
			}
			if _, err := file.ReadAt(buf[:run.n], run.off); err != nil {
				return fmt.Errorf("read %s: %w", name, err)
			}
			c := Chunk{Seq: run.seq, Stream: name, Data: buf[:run.n]}
			run.kind = 0
			return fn(c)
		}
		for ; pos < records; pos++ {
			rec, err := ir.at(pos, records)
			if err != nil {
				return nil, err
			}
			seq, kind, off, n := decodeRecord(rec)
			switch kind {
			case kindStdout, kindStderr:
				if n > MaxChunk {
					return nil, fmt.Errorf("output record of %d bytes of %s is corrupt", n, streamNames[kind-1])
				}
				if run.kind == kind && run.off+run.n == off && run.n+int64(n) <= MaxChunk {
					run.seq, run.n = seq, run.n+int64(n)
					continue
				}
				if err := emit(); err != nil {
					return nil, err
				}
				run.kind, run.seq, run.off, run.n = kind, seq, off, int64(n)
			case kindSkip:
				continue
			default: // kindTruncated
				if err := emit(); err != nil {
					return nil, err
				}
				if err := fn(Chunk{Seq: seq, Truncated: true}); err != nil {
					return nil, err
				}
			}
		}
		if err := emit(); err != nil {
			return nil, err
		}
		if exit != nil {
			return exit, nil
		}
		if !follow {
			return nil, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// indexReader reads an index's records a batch at a time.
type indexReader struct {
	f      *os.File
	buf    []byte
	first  int64 // the record at buf[0]
	loaded int64 // records in buf
}

// at returns record i, of the first end records, reading the batch it is
// in when it is not loaded.
func (r *indexReader) at(i, end int64) ([]byte, error) {
	if i < r.first || i >= r.first+r.loaded {
		n := min(int64(len(r.buf)/recordSize), end-i)
		if _, err := r.f.ReadAt(r.buf[:n*recordSize], i*recordSize); err != nil {
			return nil, fmt.Errorf("read output index: %w", err)
		}
		r.first, r.loaded = i, n
	}
	o := (i - r.first) * recordSize
	return r.buf[o : o+recordSize], nil
}

// search returns the index position of the first record with Seq > after.
func (l *Log) search(after int64) (int64, error) {
	l.mu.Lock()
	n := l.records
	l.mu.Unlock()
	lo, hi := int64(0), n
	var rec [recordSize]byte
	for lo < hi {
		mid := (lo + hi) / 2
		if _, err := l.index.ReadAt(rec[:], mid*recordSize); err != nil {
			return 0, fmt.Errorf("read output index: %w", err)
		}
		if seq, _, _, _ := decodeRecord(rec[:]); seq <= after {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// Stream returns a reader of one stream's recorded bytes ("stdout" or
// "stderr") as they are now, and its size.
func (l *Log) Stream(name string) (io.ReaderAt, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range streamNames {
		if s != name {
			continue
		}
		if l.streams[i] == nil {
			return emptyStream{}, 0, nil
		}
		return l.streams[i], l.sizes[i], nil
	}
	return nil, 0, fmt.Errorf("unknown stream %q", name)
}

// Changed returns a channel closed at the next change to the log.
func (l *Log) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// Close releases the log's files and wakes its readers.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	l.notify()
	return l.closeFiles()
}

func (l *Log) closeFiles() error {
	var errs []error
	for _, f := range []*os.File{l.streams[0], l.streams[1], l.index} {
		if f != nil {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// Ended reports whether nothing more will be recorded: the command ended or
// the log was closed.
func (l *Log) Ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.exit != nil || l.closed
}

// emptyStream is a stream that recorded nothing (it has no file).
type emptyStream struct{}

func (emptyStream) ReadAt([]byte, int64) (int, error) { return 0, io.EOF }
