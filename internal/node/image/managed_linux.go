package image

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Managed image contents.
const (
	ManagedSuite   = "bookworm"
	ManagedVariant = "minbase"
)

// ManagedPackages are installed on top of minbase.
var ManagedPackages = []string{"bash", "coreutils", "procps", "git", "python3", "nodejs", "curl", "ca-certificates"}

// ManagedOptions tunes the build of the managed image.
type ManagedOptions struct {
	// Mirror is the Debian archive debootstrap fetches from; empty leaves
	// debootstrap's own default.
	Mirror string
	// Debootstrap is the debootstrap binary; default "debootstrap".
	Debootstrap string
}

// EnsureManaged returns the managed Debian image under imagesDir, building
// it with debootstrap when absent (about a minute with a good network).
// debootstrap's progress lines go to progress, which may be nil.
func EnsureManaged(ctx context.Context, imagesDir string, ids IDMap, progress io.Writer, log *slog.Logger) (Image, error) {
	return EnsureManagedWith(ctx, imagesDir, ids, ManagedOptions{}, progress, log)
}

// EnsureManagedWith is EnsureManaged with options.
func EnsureManagedWith(ctx context.Context, imagesDir string, ids IDMap, opts ManagedOptions, progress io.Writer, log *slog.Logger) (Image, error) {
	if opts.Debootstrap == "" {
		opts.Debootstrap = "debootstrap"
	}
	if progress == nil {
		progress = io.Discard
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return ensure(ctx, imagesDir, ManagedName, ids, log, func(ctx context.Context, rootfs string) ([]string, error) {
		start := time.Now()
		log.Info("building managed image", "suite", ManagedSuite, "dir", rootfs)
		if err := debootstrap(ctx, opts, rootfs, progress); err != nil {
			return nil, err
		}
		if err := customize(ctx, rootfs); err != nil {
			return nil, err
		}
		log.Info("built managed image", "took", time.Since(start).Round(time.Millisecond))
		return []string{"/bin/bash", "-lc"}, nil
	})
}

func debootstrap(ctx context.Context, opts ManagedOptions, rootfs string, progress io.Writer) error {
	args := []string{
		"--variant=" + ManagedVariant,
		"--include=" + strings.Join(ManagedPackages, ","),
		ManagedSuite, rootfs,
	}
	if opts.Mirror != "" {
		args = append(args, opts.Mirror)
	}
	cmd := exec.CommandContext(ctx, opts.Debootstrap, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	tb := &tailBuffer{max: 4 << 10}
	out := &syncWriter{w: io.MultiWriter(progress, tb)}
	cmd.Stdout, cmd.Stderr = out, out
	// A private mount namespace: the /proc and /sys that debootstrap mounts
	// in the target vanish with it, even when it is killed halfway.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("debootstrap: %w", context.Cause(ctx))
		}
		msg := tail(tb.bytes(), 10)
		if b, rerr := os.ReadFile(filepath.Join(rootfs, "debootstrap/debootstrap.log")); rerr == nil {
			msg += "\n" + tail(b, 10)
		}
		return fmt.Errorf("debootstrap: %w: %s", err, msg)
	}
	return nil
}

// customize adds user (1000) and /workspace, and drops what apt cached.
func customize(ctx context.Context, rootfs string) error {
	useradd := exec.CommandContext(ctx, "chroot", rootfs,
		"useradd", "--create-home", "--home-dir", "/home/user", "--uid", "1000",
		"--user-group", "--shell", "/bin/bash", "user")
	useradd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	if out, err := useradd.CombinedOutput(); err != nil {
		return fmt.Errorf("add user: %w: %s", err, out)
	}
	ws := filepath.Join(rootfs, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return fmt.Errorf("create /workspace: %w", err)
	}
	if err := os.Chown(ws, 1000, 1000); err != nil {
		return fmt.Errorf("create /workspace: %w", err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc/hostname"), []byte("sandbox\n"), 0o644); err != nil {
		return err
	}
	for _, pattern := range []string{
		"var/cache/apt/archives/*.deb",
		"var/cache/apt/archives/partial/*",
		"var/cache/apt/*.bin",
		"var/lib/apt/lists/*_*",
		"var/log/apt/*",
		"var/log/dpkg.log",
		"var/log/bootstrap.log",
	} {
		matches, err := filepath.Glob(filepath.Join(rootfs, pattern))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return fmt.Errorf("clean apt caches: %w", err)
			}
		}
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.b...)
}

// syncWriter serializes writes from a command's stdout and stderr copiers.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.w.Write(p)
	if err != nil {
		// A broken progress writer must not fail the build.
		return len(p), nil
	}
	return n, nil
}
