package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// command is one process started by POST /v1/commands and what the agent
// keeps of it until DELETE.
type command struct {
	id      string
	seq     int64 // order of creation, for listing
	pid     int   // also its process group (and session with a PTY)
	timeout time.Duration
	grace   time.Duration
	log     *slog.Logger
	out     *outputBuffer
	pty     *os.File // the terminal's master side; nil without PTY
	stdin   *stdinPipe

	exited chan struct{}   // closed once the main process is reaped
	status unix.WaitStatus // set before exited is closed

	dlMu     sync.Mutex
	exitTime time.Time     // when exited was seen; zero before
	readers  []*pipeReader // output readers, whose deadlines follow exitTime
}

// pipeReader is one output stream of a command: it turns reads into frames.
type pipeReader struct {
	f       *os.File
	kind    byte
	blocked time.Duration // time spent waiting for buffer space after exit
}

func (c *command) setExited(ws unix.WaitStatus) {
	c.status = ws
	close(c.exited)
}

func (c *command) hasExited() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

func (c *command) statusView() wire.CommandStatus {
	return wire.CommandStatus{ID: c.id, PID: c.pid, Running: !c.out.isEnded(), LastSeq: c.out.lastSeq()}
}

// read turns the reads of r into frames until end of file, an error, or the
// read deadline that follows the exit of the main process.
func (c *command) read(r *pipeReader) {
	buf := newFrameBuf()
	grown := false
	for {
		n, err := r.f.Read(buf)
		if n > 0 {
			if !grown && n == wire.MaxFrameData {
				// A full read: the command writes faster than it is
				// read. Only such a stream gets the larger pipe.
				growPipe(r.f)
				grown = true
			}
			var waited time.Duration
			var ok bool
			buf, waited, ok = c.out.take(r.kind, buf, n)
			if !ok {
				return
			}
			if waited > 0 {
				// Time spent blocked by a slow host does not count against
				// the grace period: the pipe may still hold the last output.
				c.dlMu.Lock()
				if !c.exitTime.IsZero() {
					r.blocked += waited
					c.setDeadlineLocked(r)
				}
				c.dlMu.Unlock()
			}
		}
		if err != nil {
			// io.EOF for pipes, EIO for a terminal whose other side is all
			// closed, os.ErrDeadlineExceeded when a background process
			// kept the output open past the grace period.
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, syscall.EIO) {
				c.log.Warn("read command output", "err", err)
			}
			return
		}
	}
}

func (c *command) setDeadlineLocked(r *pipeReader) {
	if err := r.f.SetReadDeadline(c.exitTime.Add(c.grace + r.blocked)); err != nil {
		c.log.Warn("set read deadline", "err", err)
	}
}

// supervise waits for the main process (killing the group at the timeout),
// then for the output to end, and appends the exit frame.
func (c *command) supervise(readers *sync.WaitGroup) {
	var timeout <-chan time.Time
	if c.timeout > 0 {
		t := time.NewTimer(c.timeout)
		defer t.Stop()
		timeout = t.C
	}
	timedOut := false
	select {
	case <-c.exited:
	case <-timeout:
		timedOut = true
		c.log.Info("command timed out", "timeout", c.timeout)
		_ = unix.Kill(-c.pid, unix.SIGKILL)
		<-c.exited
	}
	c.dlMu.Lock()
	c.exitTime = time.Now()
	for _, r := range c.readers {
		c.setDeadlineLocked(r)
	}
	c.dlMu.Unlock()
	if timedOut {
		clearGroup(c.pid, 2*time.Second)
	}
	readers.Wait()
	c.stdin.close()
	for _, r := range c.readers {
		r.f.Close() // the terminal's master with a PTY
	}
	exit := exitData(c.status, timedOut)
	data, _ := json.Marshal(exit) // cannot fail
	// Logged before the exit is published: once the host sees a command
	// end, the agent's log (on the sandbox's disk) has its last line.
	c.log.Info("command ended", "exit_code", exit.ExitCode, "signal", exit.Signal, "timed_out", timedOut)
	c.out.finish(data)
}

func exitData(ws unix.WaitStatus, timedOut bool) wire.ExitData {
	e := wire.ExitData{ExitCode: ws.ExitStatus(), TimedOut: timedOut}
	if ws.Signaled() {
		e.ExitCode = -1
		e.Signal = signalName(ws.Signal())
	}
	return e
}

func signalName(sig unix.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return strings.TrimPrefix(name, "SIG")
	}
	return strconv.Itoa(int(sig))
}

// parseSignal accepts the signals a host may send, by name with or without
// the SIG prefix.
func parseSignal(name string) (unix.Signal, bool) {
	switch strings.TrimPrefix(strings.ToUpper(name), "SIG") {
	case "TERM":
		return unix.SIGTERM, true
	case "KILL":
		return unix.SIGKILL, true
	case "INT":
		return unix.SIGINT, true
	case "HUP":
		return unix.SIGHUP, true
	case "QUIT":
		return unix.SIGQUIT, true
	case "USR1":
		return unix.SIGUSR1, true
	case "USR2":
		return unix.SIGUSR2, true
	case "STOP":
		return unix.SIGSTOP, true
	case "CONT":
		return unix.SIGCONT, true
	case "WINCH":
		return unix.SIGWINCH, true
	}
	return 0, false
}

// clearGroup kills process group pgid until it is empty (its members killed
// and reaped) or patience runs out.
func clearGroup(pgid int, patience time.Duration) {
	deadline := time.Now().Add(patience)
	for {
		// kill succeeds while any member remains, zombies included.
		if err := unix.Kill(-pgid, unix.SIGKILL); errors.Is(err, unix.ESRCH) || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stdinPipe is the write side of a command's standard input: a pipe, or the
// terminal's master side.
type stdinPipe struct {
	f   *os.File // nil: the command has no stdin pipe
	pty bool     // f is the terminal: end of input is ^D, f is not closed here

	mu     sync.Mutex
	busy   bool // a request is writing
	closed bool
}

// write copies r into the command's input; eof then ends the input.
func (p *stdinPipe) write(ctx context.Context, r io.Reader, eof bool) error {
	if p.f == nil {
		return errorf(409, wire.CodeConflict, "command has no stdin pipe (start it with stdin)")
	}
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		return errorf(409, wire.CodeConflict, "stdin is closed")
	case p.busy:
		p.mu.Unlock()
		return errorf(409, wire.CodeConflict, "another stdin request is in progress")
	}
	p.busy = true
	p.mu.Unlock()

	_ = p.f.SetWriteDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = p.f.SetWriteDeadline(time.Now()) })
	_, err := io.Copy(p.f, r)
	stop()
	if err == nil && eof && p.pty {
		_, err = p.f.Write([]byte{4}) // ^D: end of input for the terminal's reader
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy = false
	if p.closed || (eof && err == nil) {
		p.closed = true
		if !p.pty {
			p.f.Close()
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EPIPE):
		return errorf(409, wire.CodeConflict, "stdin is closed by the command")
	case errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil:
		return errorf(409, wire.CodeConflict, "the command ended")
	default:
		return fmt.Errorf("write stdin: %w", err)
	}
}

// close ends the input when the command has ended.
func (p *stdinPipe) close() {
	if p.f == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	if p.busy {
		// The writer closes it when it returns.
		_ = p.f.SetWriteDeadline(time.Now())
		return
	}
	if !p.pty {
		p.f.Close()
	}
}

// validateExec checks a request before anything starts.
func validateExec(req *wire.ExecRequest) error {
	bad := func(format string, args ...any) error {
		return errorf(400, wire.CodeInvalidArgument, format, args...)
	}
	switch {
	case !wire.ValidID(req.ID):
		return bad("id %s must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -", strconv.Quote(req.ID))
	case len(req.Argv) == 0 || req.Argv[0] == "":
		return bad("argv must not be empty")
	case req.Cwd != "" && !filepath.IsAbs(req.Cwd):
		return bad("cwd %s must be absolute", strconv.Quote(req.Cwd))
	case req.UID < 0 || req.GID < 0 || req.UID > 1<<31-2 || req.GID > 1<<31-2:
		return bad("uid and gid must be between 0 and 2^31-2")
	case req.TimeoutMS < 0 || req.TimeoutMS > maxTimeoutMS:
		return bad("timeout_ms must be between 0 and %d", maxTimeoutMS)
	case req.PTY != nil && (req.PTY.Cols <= 0 || req.PTY.Rows <= 0 || req.PTY.Cols > 65535 || req.PTY.Rows > 65535):
		return bad("pty size %dx%d must be between 1 and 65535", req.PTY.Cols, req.PTY.Rows)
	}
	for _, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return bad("argv must not contain NUL bytes")
		}
	}
	for _, e := range req.Env {
		if strings.IndexByte(e, 0) >= 0 || !strings.Contains(e, "=") {
			return bad("env entry %s must be KEY=VALUE without NUL bytes", strconv.Quote(e))
		}
	}
	if strings.IndexByte(req.Cwd, 0) >= 0 {
		return bad("cwd must not contain NUL bytes")
	}
	return nil
}

// maxTimeoutMS is a year: far beyond any sandbox, far below an overflow.
const maxTimeoutMS = int64(365 * 24 * time.Hour / time.Millisecond)

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lookPath finds file as execve will run it: as a path (relative to cwd)
// when it has a slash, else in PATH of env.
func lookPath(file, cwd string, env []string) (string, error) {
	notFound := errorf(400, wire.CodeInvalidArgument, "executable file not found: %s", file)
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(cwd, p)
	}
	if strings.Contains(file, "/") {
		p := abs(file)
		if err := checkExecutable(p); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return "", notFound
			}
			return "", errorf(400, wire.CodeInvalidArgument, "%s: %v", file, err)
		}
		return p, nil
	}
	path := defaultPath
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v // the last one wins, as in os/exec
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := abs(filepath.Join(dir, file))
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", notFound
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return errors.New("is a directory")
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return errors.New("permission denied")
	}
	return nil
}

// procFiles are the descriptors of a command before its start: the child's
// ends (closed in the agent after the fork) and the agent's.
type procFiles struct {
	child           []*os.File // stdin, stdout, stderr of the child
	closeAfterStart []*os.File
	closeOnError    []*os.File
	stdin           *stdinPipe
	readers         []*pipeReader
	pty             *os.File
}

func (pf *procFiles) closeChild() {
	for _, f := range pf.closeAfterStart {
		f.Close()
	}
	pf.closeAfterStart = nil
}

func (pf *procFiles) closeAll() {
	pf.closeChild()
	for _, f := range pf.closeOnError {
		f.Close()
	}
}

// openFiles prepares stdin/stdout/stderr as req asks.
func openFiles(req *wire.ExecRequest) (pf *procFiles, err error) {
	pf = &procFiles{stdin: &stdinPipe{}}
	defer func() {
		if err != nil {
			pf.closeAll()
		}
	}()
	if req.PTY != nil {
		master, tty, err := openPTY()
		if err != nil {
			return pf, err
		}
		pf.closeOnError = append(pf.closeOnError, master)
		pf.closeAfterStart = append(pf.closeAfterStart, tty)
		if err := pty.Setsize(tty, &pty.Winsize{Rows: uint16(req.PTY.Rows), Cols: uint16(req.PTY.Cols)}); err != nil {
			return pf, fmt.Errorf("set terminal size: %w", err)
		}
		pf.child = []*os.File{tty, tty, tty}
		pf.pty = master
		pf.stdin = &stdinPipe{f: master, pty: true}
		pf.readers = []*pipeReader{{f: master, kind: wire.FrameStdout}}
		return pf, nil
	}

	var stdin *os.File
	if req.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return pf, fmt.Errorf("create stdin pipe: %w", err)
		}
		pf.closeAfterStart = append(pf.closeAfterStart, r)
		pf.closeOnError = append(pf.closeOnError, w)
		pf.stdin = &stdinPipe{f: w}
		stdin = r
	} else {
		null, err := os.Open(os.DevNull)
		if err != nil {
			return pf, fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		pf.closeAfterStart = append(pf.closeAfterStart, null)
		stdin = null
	}
	pf.child = []*os.File{stdin}
	for _, kind := range []byte{wire.FrameStdout, wire.FrameStderr} {
		r, w, err := os.Pipe()
		if err != nil {
			return pf, fmt.Errorf("create output pipe: %w", err)
		}
		pf.closeAfterStart = append(pf.closeAfterStart, w)
		pf.closeOnError = append(pf.closeOnError, r)
		pf.child = append(pf.child, w)
		pf.readers = append(pf.readers, &pipeReader{f: r, kind: kind})
	}
	return pf, nil
}

// outputPipeSize is what the output pipe of a command that writes fast
// holds (the kernel's default is 64 KiB): it then fills more of it while
// the agent is not running, and the agent reads it in fewer, fuller
// reads, which matters when both share the sandbox's CPU quota. A pipe is
// grown only once a read fills a whole frame: the kernel counts pipes'
// pages against their creator's budget (fs.pipe-user-pages-soft, 64 MiB),
// and past it every new pipe of that user, the agent's and its commands',
// is made small and cannot grow, so commands that print little keep the
// default.
const outputPipeSize = 1 << 20

// growPipe makes the pipe r reads hold outputPipeSize, when the kernel
// lets it (its limits on pipe sizes may refuse: the pipe stays as it is).
func growPipe(r *os.File) {
	if rc, err := r.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, outputPipeSize) })
	}
}

// openPTY opens a terminal pair. The master is returned in non-blocking mode
// so that reads honour deadlines (pty.Open leaves it blocking).
func openPTY() (master, tty *os.File, err error) {
	m, tty, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open terminal: %w", err)
	}
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		tty.Close()
		return nil, nil, fmt.Errorf("prepare terminal: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), tty, nil
}

// setSize resizes the terminal whose master is f without putting f into
// blocking mode (as f.Fd() would).
func setSize(f *os.File, s wire.Size) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(s.Rows), Col: uint16(s.Cols)})
	})
	if err != nil {
		return err
	}
	return ierr
}
