package output

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Spares are empty files, kept in a directory of their own on the logs'
// filesystem, that new logs take instead of creating files: the files of
// the logs of a sandbox that is gone are emptied and kept (Recycle), not
// deleted. Creating a file allocates an inode, and on ext4 without a
// journal that allocation passes over every inode freed in the last
// minutes, one by one: on a node where sandboxes come and go with their
// commands' logs, each new log then cost a millisecond of CPU or more.
// A rename allocates nothing. A nil *Spares keeps none: logs create their
// files, and Recycle deletes.
type Spares struct {
	dir string
	max int

	mu      sync.Mutex
	names   []string // the spares in dir, each empty
	pending int      // spares being put in dir (Recycle)
	next    uint64   // names the next spare
}

// OpenSpares keeps at most max spares in dir, made if missing, and takes
// up the empty files an earlier run left there; anything else there goes.
func OpenSpares(dir string, max int) (*Spares, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spare files: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("spare files: %w", err)
	}
	s := &Spares{dir: dir, max: max, next: uint64(time.Now().UnixNano())}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && e.Type().IsRegular() && info.Size() == 0 && len(s.names) < max {
			s.names = append(s.names, e.Name())
			continue
		}
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
	return s, nil
}

// Len is how many spares there are.
func (s *Spares) Len() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.names)
}

// create makes a new empty file at path, which must not exist (an error
// matching fs.ErrExist if it does), from a spare when there is one; the
// directory holding path must exist (an error matching fs.ErrNotExist).
func (s *Spares) create(path string) (*os.File, error) {
	for s != nil {
		name, ok := s.pop()
		if !ok {
			break
		}
		err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(s.dir, name), unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
		if err == nil {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				os.Remove(path)
				return nil, err
			}
			return f, nil
		}
		if errors.Is(err, unix.ENOENT) {
			if _, serr := os.Lstat(filepath.Join(s.dir, name)); serr != nil {
				continue // the spare is gone: the next one
			}
		}
		// path exists, or its directory does not: the spare stays, and
		// creating the file answers as it would without spares.
		s.push(name)
		break
	}
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
}

// Recycle removes dir, a sandbox's logs: its files are emptied and kept
// as spares while there is room, and the rest is deleted.
func (s *Spares) Recycle(dir string) error {
	if s != nil {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			name, ok := s.reserve()
			if !ok {
				return fs.SkipAll
			}
			// Emptied first: a spare never holds a byte of what it held.
			if os.Truncate(p, 0) == nil &&
				unix.Renameat2(unix.AT_FDCWD, p, unix.AT_FDCWD, filepath.Join(s.dir, name), unix.RENAME_NOREPLACE) == nil {
				s.push(name)
			}
			s.unreserve()
			return nil
		})
	}
	return os.RemoveAll(dir)
}

func (s *Spares) pop() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.names) == 0 {
		return "", false
	}
	name := s.names[len(s.names)-1]
	s.names = s.names[:len(s.names)-1]
	return name, true
}

func (s *Spares) push(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names = append(s.names, name)
}

// reserve names a new spare if there is room for one more; unreserve
// gives the room back once it is pushed (or failed).
func (s *Spares) reserve() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.names)+s.pending >= s.max {
		return "", false
	}
	s.next++
	s.pending++
	return strconv.FormatUint(s.next, 36), true
}

func (s *Spares) unreserve() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
}
