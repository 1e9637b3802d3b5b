package guest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/wire"
)

// Server is cove-agent's side of the protocol: it starts and reaps the
// sandbox's processes and serves their output.
//
// Commands belong to the Server, not to a request or a connection: they keep
// running while no host is connected and after Serve returns. Close kills
// them. One process runs one Server (it reaps every child of the process).
type Server struct {
	cfg ServerConfig
	log *slog.Logger

	cmdWG      sync.WaitGroup // supervise goroutines (each waits for its readers)
	reaperWG   sync.WaitGroup
	handlersWG sync.WaitGroup // HTTP handlers of the running Serve

	procMu sync.Mutex
	procs  map[int]*command // by pid, until reaped

	ownersMu sync.Mutex // one socket owner lookup at a time

	mu          sync.Mutex
	cmds        map[string]*command
	ended       map[int]endedCommand // forgotten commands whose process group may live on, by pid
	nextSeq     int64
	closed      bool
	stopReaper  context.CancelFunc // nil until the reaper starts
	serving     bool
	handlersOff bool // Serve is ending: refuse new handlers
}

// NewServer returns a server for cfg (see ServerConfig for defaults). It
// starts nothing.
func NewServer(cfg ServerConfig, log *slog.Logger) *Server {
	return &Server{
		cfg:   cfg.withDefaults(),
		log:   log,
		procs: make(map[int]*command),
		cmds:  make(map[string]*command),
		ended: make(map[int]endedCommand),
	}
}

// Serve prepares the sandbox (work directory, reaper) and answers the
// protocol on l until ctx is done; it then closes l and the connections and
// returns nil once its handlers have returned. Commands keep running.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	if err := s.prepare(); err != nil {
		l.Close()
		return err
	}
	defer func() {
		s.mu.Lock()
		s.serving = false
		s.mu.Unlock()
	}()

	// Requests live within Serve: their contexts end when it does.
	reqCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	hs := &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { errc <- hs.Serve(l) })

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("serve: %w", err)
	}
	hs.Close()
	cancel()
	wg.Wait()
	s.mu.Lock()
	s.handlersOff = true
	s.mu.Unlock()
	s.handlersWG.Wait()
	return err
}

// prepare runs once per Serve: it creates the work directory and starts the
// reaper the first time.
func (s *Server) prepare() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return errors.New("serve: server is closed")
	case s.serving:
		return errors.New("serve: already serving")
	}
	if err := s.cfg.Validate(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if s.stopReaper == nil {
		if err := os.MkdirAll(s.cfg.Workdir, 0o755); err != nil {
			return fmt.Errorf("create workdir: %w", err)
		}
		if os.Geteuid() == 0 {
			if err := os.Chown(s.cfg.Workdir, s.cfg.UID, s.cfg.GID); err != nil {
				return fmt.Errorf("chown workdir: %w", err)
			}
		}
		if err := s.startReaper(); err != nil {
			return err
		}
	}
	s.serving = true
	s.handlersOff = false
	return nil
}

// Close kills every command's process group, waits for their ends and stops
// the reaper. Serve should have returned.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	cmds := make([]*command, 0, len(s.cmds))
	for _, c := range s.cmds {
		cmds = append(cmds, c)
	}
	stop := s.stopReaper
	s.mu.Unlock()
	for _, c := range cmds {
		if !c.out.isEnded() {
			_ = unix.Kill(-c.pid, unix.SIGKILL)
		}
		c.out.abort()
	}
	s.cmdWG.Wait()
	if stop != nil {
		stop()
		s.reaperWG.Wait()
	}
	return nil
}

// KillAll sends SIGKILL to the process group of every command that has not
// ended.
func (s *Server) KillAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cmds {
		if !c.out.isEnded() {
			_ = unix.Kill(-c.pid, unix.SIGKILL)
		}
	}
}

type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, h handlerFunc) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			if s.handlersOff {
				s.mu.Unlock()
				writeError(w, errorf(http.StatusServiceUnavailable, "", "agent is shutting down"))
				return
			}
			s.handlersWG.Add(1)
			s.mu.Unlock()
			defer s.handlersWG.Done()
			if err := h(w, r); err != nil {
				var e *Error
				if !errors.As(err, &e) {
					s.log.Error("request", "method", r.Method, "path", r.URL.Path, "err", err)
				}
				writeError(w, err)
			}
		})
	}
	route("GET /v1/ping", s.ping)
	route("POST /v1/commands", s.exec)
	route("GET /v1/commands", s.list)
	route("GET /v1/commands/{id}/output", s.output)
	route("POST /v1/commands/{id}/ack", s.ack)
	route("POST /v1/commands/{id}/stdin", s.stdin)
	route("POST /v1/commands/{id}/signal", s.signal)
	route("POST /v1/commands/{id}/resize", s.resize)
	route("DELETE /v1/commands/{id}", s.forget)
	route("POST /v1/sockets/owners", s.owners)
	s.fileRoutes(route)
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Message: "internal error: " + err.Error()}
	}
	writeJSON(w, e.Status, wire.ErrorBody{Error: e.Message, Code: e.Code})
}

func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, wire.MaxJSON)).Decode(v); err != nil {
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "bad JSON body: %v", err)
	}
	return nil
}

func (s *Server) lookup(r *http.Request) (*command, error) {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cmds[id]
	if c == nil {
		return nil, errorf(http.StatusNotFound, wire.CodeNotFound, "command %s not found", strconv.Quote(id))
	}
	return c, nil
}

func (s *Server) ping(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, wire.Ping{Version: wire.Version, PID: os.Getpid()})
	return nil
}

func (s *Server) list(w http.ResponseWriter, _ *http.Request) error {
	s.mu.Lock()
	cmds := make([]*command, 0, len(s.cmds))
	for _, c := range s.cmds {
		cmds = append(cmds, c)
	}
	s.mu.Unlock()
	slices.SortFunc(cmds, func(a, b *command) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]wire.CommandStatus, len(cmds))
	for i, c := range cmds {
		out[i] = c.statusView()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) error {
	var req wire.ExecRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if err := validateExec(&req); err != nil {
		return err
	}
	c, err := s.start(req)
	if err != nil {
		return err
	}
	if r.URL.RawQuery != wire.StreamQuery {
		writeJSON(w, http.StatusCreated, c.statusView())
		return nil
	}
	// The status, then the output as GET …/output?after=0 streams it.
	st, err := json.Marshal(c.statusView())
	if err != nil {
		return err
	}
	w.Header().Set(wire.StatusHeader, string(st))
	return s.stream(w, r, c, 0)
}

// start starts the command of a validated request.
func (s *Server) start(req wire.ExecRequest) (*command, error) {
	cwd := cmp.Or(req.Cwd, s.cfg.Workdir)
	if fi, err := os.Stat(cwd); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "working directory %s does not exist", cwd)
		}
		return nil, errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "working directory %s: %v", cwd, err)
	} else if !fi.IsDir() {
		return nil, errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "working directory %s is not a directory", cwd)
	}
	argv0, err := lookPath(req.Argv[0], cwd, req.Env)
	if err != nil {
		return nil, err
	}

	// s.mu is held from here to the start of the goroutines, so that Close
	// sees every command whose goroutines it must wait for.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errorf(http.StatusServiceUnavailable, "", "agent is shutting down")
	}
	if _, ok := s.cmds[req.ID]; ok {
		return nil, errorf(http.StatusConflict, wire.CodeConflict, "command %s already exists", req.ID)
	}
	pf, err := openFiles(&req)
	if err != nil {
		return nil, err
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	if pf.pty != nil {
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	if os.Geteuid() == 0 {
		sys.Credential = &syscall.Credential{Uid: uint32(req.UID), Gid: uint32(req.GID), Groups: []uint32{}}
	}
	fds := make([]uintptr, len(pf.child))
	for i, f := range pf.child {
		fds[i] = f.Fd() // also puts the child's ends in blocking mode
	}
	s.nextSeq++
	c := &command{
		id:      req.ID,
		seq:     s.nextSeq,
		timeout: time.Duration(req.TimeoutMS) * time.Millisecond,
		grace:   s.cfg.ExitGrace,
		out:     newOutputBuffer(s.cfg.MaxBuffer),
		pty:     pf.pty,
		stdin:   pf.stdin,
		exited:  make(chan struct{}),
		readers: pf.readers,
	}

	// procMu spans fork and registration: the reaper cannot look the pid up
	// before it is registered, even when the child exits at once.
	s.procMu.Lock()
	defaultSignals()
	pid, err := syscall.ForkExec(argv0, req.Argv, &syscall.ProcAttr{Dir: cwd, Env: req.Env, Files: fds, Sys: sys})
	if err == nil {
		c.pid = pid
		s.procs[pid] = c
	}
	s.procMu.Unlock()
	pf.closeChild()
	if err != nil {
		pf.closeAll()
		return nil, startError(req.Argv[0], cwd, err)
	}

	c.log = s.log.With("command", c.id, "pid", pid)
	c.log.Info("command started", "argv", req.Argv, "cwd", cwd, "uid", req.UID, "pty", req.PTY != nil)
	s.cmds[c.id] = c
	var readers sync.WaitGroup
	for _, r := range c.readers {
		readers.Go(func() { c.read(r) })
	}
	s.cmdWG.Go(func() { c.supervise(&readers) })
	return c, nil
}

func startError(file, cwd string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "executable file not found: %s", file)
	case errors.Is(err, syscall.EACCES):
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "permission denied: %s (in %s)", file, cwd)
	case errors.Is(err, syscall.ENOEXEC):
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "exec format error: %s", file)
	case errors.Is(err, syscall.ENOTDIR):
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "not a directory: %s or %s", file, cwd)
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.ENOMEM):
		return errorf(http.StatusTooManyRequests, wire.CodeResourceExhausted, "cannot start %s: the sandbox is out of processes or memory (%v); wait for some to end", file, err)
	}
	return fmt.Errorf("start %s: %w", file, err)
}

func (s *Server) output(w http.ResponseWriter, r *http.Request) error {
	c, err := s.lookup(r)
	if err != nil {
		return err
	}
	after := int64(0)
	if v := r.URL.Query().Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil {
			return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "after %s is not a number", strconv.Quote(v))
		}
	}
	if err := c.out.ack(after); err != nil {
		return err
	}
	return s.stream(w, r, c, after)
}

// stream answers the output of c after frame `after` until its exit frame
// (or the host goes away).
func (s *Server) stream(w http.ResponseWriter, r *http.Request, c *command, after int64) error {
	frames, done, wait, err := c.out.next(after, 64)
	if err != nil {
		return err
	}
	if done && len(frames) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return nil // the host went away; nothing is lost
	}
	for {
		for _, f := range frames {
			if err := wire.WriteFrame(w, f); err != nil {
				return nil
			}
			after = f.Seq
		}
		if len(frames) > 0 {
			if err := rc.Flush(); err != nil {
				return nil
			}
		}
		if done {
			return nil
		}
		if len(frames) == 0 {
			select {
			case <-wait:
			case <-r.Context().Done():
				return nil
			}
		}
		frames, done, wait, err = c.out.next(after, 64)
		if err != nil {
			// Another reader acknowledged past this one: end the stream
			// without an exit frame; the client sees it cut short.
			c.log.Debug("output stream overtaken", "err", err)
			return nil
		}
	}
}

func (s *Server) ack(w http.ResponseWriter, r *http.Request) error {
	c, err := s.lookup(r)
	if err != nil {
		return err
	}
	v := r.URL.Query().Get("seq")
	seq, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "seq %s is not a number", strconv.Quote(v))
	}
	if err := c.out.ack(seq); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) stdin(w http.ResponseWriter, r *http.Request) error {
	c, err := s.lookup(r)
	if err != nil {
		return err
	}
	eof := false
	if v := r.URL.Query().Get("eof"); v != "" {
		if eof, err = strconv.ParseBool(v); err != nil {
			return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "eof %s is not a boolean", strconv.Quote(v))
		}
	}
	if err := c.stdin.write(r.Context(), r.Body, eof); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) signal(w http.ResponseWriter, r *http.Request) error {
	c, err := s.lookup(r)
	if err != nil {
		return err
	}
	var req wire.SignalRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	sig, ok := parseSignal(req.Signal)
	if !ok {
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "unknown signal %s", strconv.Quote(req.Signal))
	}
	if c.hasExited() {
		return errorf(http.StatusConflict, wire.CodeConflict, "command %s has exited", c.id)
	}
	if err := unix.Kill(-c.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal process group %d: %w", c.pid, err)
	}
	c.log.Info("signalled", "signal", signalName(sig))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) resize(w http.ResponseWriter, r *http.Request) error {
	c, err := s.lookup(r)
	if err != nil {
		return err
	}
	var size wire.Size
	if err := decodeJSON(w, r, &size); err != nil {
		return err
	}
	if size.Cols <= 0 || size.Rows <= 0 || size.Cols > 65535 || size.Rows > 65535 {
		return errorf(http.StatusBadRequest, wire.CodeInvalidArgument, "size %dx%d must be between 1 and 65535", size.Cols, size.Rows)
	}
	if c.pty == nil {
		return errorf(http.StatusConflict, wire.CodeConflict, "command %s has no terminal", c.id)
	}
	if c.out.isEnded() {
		return errorf(http.StatusConflict, wire.CodeConflict, "command %s has ended", c.id)
	}
	if err := setSize(c.pty, size); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return errorf(http.StatusConflict, wire.CodeConflict, "command %s has ended", c.id)
		}
		return fmt.Errorf("resize terminal: %w", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) forget(w http.ResponseWriter, r *http.Request) error {
	c, err := s.lookup(r)
	if err != nil {
		return err
	}
	if !c.out.isEnded() {
		return errorf(http.StatusConflict, wire.CodeConflict, "command %s is still running", c.id)
	}
	s.mu.Lock()
	if s.cmds[c.id] == c {
		delete(s.cmds, c.id)
		s.rememberEndedLocked(c)
	}
	s.mu.Unlock()
	c.out.abort() // wakes streams that wait on it
	w.WriteHeader(http.StatusNoContent)
	return nil
}
