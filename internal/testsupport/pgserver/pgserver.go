// Package pgserver runs a real PostgreSQL for tests: one throwaway
// cluster per test binary (initdb in a temporary directory, a free
// loopback port, fsync off, its unix socket in that directory), and a
// fresh database per test.
//
// The binaries are $COVE_PGBIN's, else the newest of
// /usr/lib/postgresql/*/bin (Debian's postgresql-15 package). Without
// them a test is skipped, or fails when COVE_REQUIRE_PG=1 (as `make test`
// sets). A package whose tests use it calls Main from its TestMain, which
// stops the cluster and removes its directory when the tests end; should
// the test binary die first, the kernel stops the cluster (parent-death
// signal) and only the directory is left in $TMPDIR.
package pgserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is the test binary's PostgreSQL cluster. Its superuser is
// postgres, trusted on loopback without a password.
type Server struct {
	bin  string              // directory of initdb and postgres
	dir  string              // the cluster's directory: data/, the socket, the log
	cred *syscall.Credential // whom the cluster runs as (postgres when we are root)
	port int

	mu      sync.Mutex
	running *process // nil while stopped
}

// process is one run of the postmaster.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd.Wait returned
	err    error         // cmd.Wait's, once exited is closed
}

var (
	sharedMu sync.Mutex
	shared   *Server
)

// BinDir is the directory of the PostgreSQL binaries the tests use, or ""
// when there is none.
func BinDir() string {
	if dir := os.Getenv("COVE_PGBIN"); dir != "" {
		if isExec(filepath.Join(dir, "initdb")) {
			return dir
		}
		return ""
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest major version first.
	slices.SortFunc(dirs, func(a, b string) int { return majorOf(b) - majorOf(a) })
	for _, dir := range dirs {
		if isExec(filepath.Join(dir, "initdb")) && isExec(filepath.Join(dir, "postgres")) {
			return dir
		}
	}
	return ""
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start returns the test binary's cluster, starting it on first use.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := BinDir()
	if bin == "" {
		msg := "no PostgreSQL (install postgresql-15, or set COVE_PGBIN)"
		if os.Getenv("COVE_REQUIRE_PG") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		return shared
	}
	sweep(time.Now())
	s, err := newServer(bin)
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	shared = s
	return s
}

// Main runs the tests of a package and then stops the cluster, if one
// started, and removes its directory. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Shutdown()
	os.Exit(code)
}

// Shutdown stops the cluster, if one started, and removes its directory:
// Main calls it, and a TestMain that runs its tests by other means (the
// root tests' harness) calls it once they have ended.
func Shutdown() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		if err := shared.destroy(); err != nil {
			fmt.Fprintf(os.Stderr, "pgserver: %v\n", err)
		}
		shared = nil
	}
}

// dirPrefix names the clusters' directories in $TMPDIR.
const dirPrefix = "cove-pg-"

// staleAfter is how old a cluster's directory with no live postmaster
// must be before sweep removes it: older than any initdb takes.
const staleAfter = 10 * time.Minute

// sweep removes what clusters of test binaries that died before Main
// stopped them left: directories whose postmaster is gone.
func sweep(now time.Time) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		st, err := os.Stat(dir)
		if err != nil || !st.IsDir() || now.Sub(st.ModTime()) < staleAfter || postmasterAlive(dir) {
			continue
		}
		os.RemoveAll(dir)
	}
}

// postmasterAlive reports whether the cluster in dir has a running
// postmaster: its postmaster.pid names a live process.
func postmasterAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return false
	}
	// Signal 0 checks that the process exists (EPERM: it does, as
	// another user).
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func newServer(bin string) (*Server, error) {
	s := &Server{bin: bin}
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, err
	}
	s.dir = dir
	// initdb and postgres refuse to run as root: the cluster belongs to
	// the postgres user then.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root needs a postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	initdb := s.command("initdb", "-D", s.dataDir(), "-U", "postgres", "--auth=trust",
		"--no-sync", "--encoding=UTF8", "--locale=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	// A port freed just before postgres takes it may be taken by someone
	// else in between: try again on another.
	for range 3 {
		if s.port, err = freePort(); err != nil {
			break
		}
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, err
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return cmd
}

// start runs the postmaster and waits until it accepts connections.
func (s *Server) start() error {
	logPath := filepath.Join(s.dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := s.command("postgres", "-D", s.dataDir(), "-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=32MB")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Immediate shutdown when the test binary dies without stopping it.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	p := &process{cmd: cmd, exited: make(chan struct{})}
	started := make(chan error, 1)
	// The parent-death signal follows the thread that started the child:
	// this goroutine keeps its thread, alive and its own, until the
	// postmaster exits.
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, s.dbURL("postgres"))
		if err == nil {
			conn.Close(ctx)
			s.mu.Lock()
			s.running = p
			s.mu.Unlock()
			return nil
		}
		select {
		case <-p.exited:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres exited (%v): %s", p.err, tail(log))
		case <-ctx.Done():
			stopProcess(p)
			return fmt.Errorf("postgres on port %d did not answer: %v", s.port, err)
		case <-time.After(20 * time.Millisecond): // poll again: it is still starting
		}
	}
}

// stopProcess shuts the postmaster down fast (SIGINT: sessions end,
// the data stays), immediately if it takes too long.
func stopProcess(p *process) {
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Signal(syscall.SIGQUIT)
		<-p.exited
	}
}

func (s *Server) stop() {
	s.mu.Lock()
	p := s.running
	s.running = nil
	s.mu.Unlock()
	if p != nil {
		stopProcess(p)
	}
}

func (s *Server) destroy() error {
	s.stop()
	return os.RemoveAll(s.dir)
}

// Restart stops the cluster (fast: open sessions are cut) and starts it
// again on the same port, as `pg_ctl restart -m fast` would. Every
// connection open before it is broken after it.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	var err error
	for range 50 {
		if err = s.start(); err == nil {
			return
		}
		// The old postmaster's port may linger a moment.
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("restart PostgreSQL: %v", err)
}

// URL is the postgres:// URL of the cluster's postgres database, as its
// superuser.
func (s *Server) URL() string { return s.dbURL("postgres") }

// Port is the cluster's loopback TCP port.
func (s *Server) Port() int { return s.port }

func (s *Server) dbURL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, name)
}

var unsafeName = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDatabase creates an empty database with a name unique to the test
// and returns its URL; the database is dropped when the test ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := strings.Trim(unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	name = "t_" + name + "_" + randHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.admin(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// FORCE ends the sessions a store left open.
		if err := s.admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return s.dbURL(name)
}

// admin runs a statement on the postgres database.
func (s *Server) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// tail is the end of a log, enough to say why postgres stopped.
func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
