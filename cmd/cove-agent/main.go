// Command cove-agent is the init process of every cove sandbox: it starts,
// reaps and serves the sandbox's commands over the protocol of package wire
// (its server is package guest, which only this binary links), on the
// socket it inherits as descriptor wire.ListenFD (or on --listen, for tests).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/cmd/cove-agent/internal/guest"
	"github.com/cove-dev/cove/internal/agent/wire"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// Not dumpable: nothing in the sandbox, root included, may ptrace the
	// agent, read its memory or environment, or take its descriptors (the
	// listening socket) with pidfd_getfd; the sandbox has no CAP_SYS_PTRACE
	// to override it. Commands are not affected: execve makes an ordinary
	// program dumpable again.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		log.Error("cove-agent: make the agent non-dumpable", "err", err)
		os.Exit(1)
	}
	spareThreads(spares)
	if err := run(context.Background(), os.Args[1:], os.Stderr, log); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		log.Error("cove-agent", "err", err)
		os.Exit(1)
	}
}

// spares is how many idle threads the agent makes at start.
const spares = 4

// spareThreads has the Go runtime make n threads beyond the ones it runs
// on, and keep them idle: it never ends an idle thread. Every thread
// counts against the sandbox's pids limit, so a fork bomb that takes
// every pid leaves the runtime unable to make one, and a runtime that
// needs a thread it cannot make exits, taking the sandbox with it. Each
// time a goroutine blocks in a system call (the SIGCHLD a bomb's
// processes send wake one, the reaper, a disk write) the runtime hands
// its P to another thread: an idle one when it has one.
func spareThreads(n int) {
	var locked, release, unlocked sync.WaitGroup
	locked.Add(n)
	release.Add(1)
	unlocked.Add(n)
	for range n {
		go func() {
			// A goroutine locked to its thread keeps it while it waits,
			// so the next one needs another thread.
			runtime.LockOSThread()
			locked.Done()
			release.Wait()
			// Unlocked before it ends, the thread goes idle rather
			// than away.
			runtime.UnlockOSThread()
			unlocked.Done()
		}()
	}
	locked.Wait()
	release.Done()
	unlocked.Wait()
}

// run serves until SIGTERM or SIGINT (or ctx ends), then kills every
// command's process group and returns.
func run(ctx context.Context, args []string, stderr io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("cove-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := guest.ServerConfig{}
	fs.StringVar(&cfg.Workdir, "workdir", "/workspace", "work directory, created at start and owned by --uid:--gid")
	fs.IntVar(&cfg.UID, "uid", 1000, "uid of the sandbox's default user")
	fs.IntVar(&cfg.GID, "gid", 1000, "gid of the sandbox's default user")
	listen := fs.String("listen", "", "unix socket path to listen on (default: the inherited descriptor 3)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	l, err := listener(*listen)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv := guest.NewServer(cfg, log)
	log.Info("cove-agent serving", "pid", os.Getpid(), "addr", l.Addr().String())
	err = srv.Serve(ctx, l)
	log.Info("cove-agent stopping")
	if cerr := srv.Close(); err == nil {
		err = cerr
	}
	return err
}

func listener(path string) (net.Listener, error) {
	if path != "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		return l, nil
	}
	f := os.NewFile(wire.ListenFD, "listener")
	if f == nil {
		return nil, fmt.Errorf("no listener on descriptor %d", wire.ListenFD)
	}
	defer f.Close() // FileListener dups it
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listener on descriptor %d: %w", wire.ListenFD, err)
	}
	return l, nil
}
