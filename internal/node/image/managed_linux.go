package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
var ManagedPackages = []string{"bash", "coreutils", "procps", "git", "python3", "nodejs", "curl", "ca-certificates", "sudo"}

// managedCustomization names what customize adds to debootstrap's tree;
// a change to customize changes it, so that images built before are
// built again.
const managedCustomization = "user-1000,workspace,hostname,sudoers-user-nopasswd"

// SudoersFile lets user run anything as anyone through sudo, without a
// password. sudo raises privileges only in sandboxes that may run
// set-uid programs (E2B's; docs/security.md); in the others it fails.
const SudoersFile = "etc/sudoers.d/user"

// ManagedRecipe names what the managed image is built from: its suite,
// variant, packages and customization. It is kept in the image's
// image.json; an image of another recipe is built again
// (EnsureManagedWith), so that a change to ManagedPackages reaches an
// images dir that holds an older build.
func ManagedRecipe() string {
	h := sha256.New()
	for _, part := range append([]string{ManagedSuite, ManagedVariant, managedCustomization}, ManagedPackages...) {
		fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// DefaultKeyring is the keyring of the Debian archive, from the package
// debian-archive-keyring.
const DefaultKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// ManagedOptions tunes the build of the managed image.
type ManagedOptions struct {
	// Mirror is the Debian archive debootstrap fetches from; empty leaves
	// debootstrap's own default.
	Mirror string
	// Debootstrap is the debootstrap binary; default "debootstrap".
	Debootstrap string
	// Keyring holds the keys the archive's Release file must be signed
	// with; default DefaultKeyring. The build refuses to start without it:
	// debootstrap runs with --force-check-gpg, so an unsigned or wrongly
	// signed archive fails the build instead of reaching sandboxes.
	Keyring string
}

// EnsureManaged returns the managed Debian image under imagesDir, building
// it with debootstrap when absent (about a minute with a good network).
// debootstrap's progress lines go to progress, which may be nil.
func EnsureManaged(ctx context.Context, imagesDir string, progress io.Writer, log *slog.Logger) (Image, error) {
	return EnsureManagedWith(ctx, imagesDir, ManagedOptions{}, progress, log)
}

// EnsureManagedWith is EnsureManaged with options.
func EnsureManagedWith(ctx context.Context, imagesDir string, opts ManagedOptions, progress io.Writer, log *slog.Logger) (Image, error) {
	if opts.Debootstrap == "" {
		opts.Debootstrap = "debootstrap"
	}
	if opts.Keyring == "" {
		opts.Keyring = DefaultKeyring
	}
	if progress == nil {
		progress = io.Discard
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return ensureRecipe(ctx, imagesDir, ManagedName, ManagedRecipe(), log, func(ctx context.Context, rootfs string) ([]string, error) {
		if err := checkKeyring(opts.Keyring); err != nil {
			return nil, err
		}
		start := time.Now()
		log.Info("building managed image", "suite", ManagedSuite, "dir", rootfs, "keyring", opts.Keyring)
		if err := debootstrap(ctx, opts, rootfs, progress); err != nil {
			return nil, err
		}
		if err := customize(rootfs); err != nil {
			return nil, err
		}
		log.Info("built managed image", "took", time.Since(start).Round(time.Millisecond))
		return []string{"/bin/bash", "-lc"}, nil
	})
}

// checkKeyring refuses a build without the archive's keyring.
func checkKeyring(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("archive keyring: %w (install debian-archive-keyring: the managed image is built only from a signed archive)", err)
	}
	if !st.Mode().IsRegular() || st.Size() == 0 {
		return fmt.Errorf("archive keyring %s: not a non-empty file", path)
	}
	return nil
}

// debootstrapArgs are debootstrap's arguments: the archive's signatures
// are checked against opts.Keyring, and a missing or bad signature fails
// the build (--force-check-gpg also stops debootstrap from falling back to
// an unchecked download when the keyring lacks a key).
func debootstrapArgs(opts ManagedOptions, rootfs string) []string {
	args := []string{
		"--variant=" + ManagedVariant,
		"--keyring=" + opts.Keyring,
		"--force-check-gpg",
		"--include=" + strings.Join(ManagedPackages, ","),
		ManagedSuite, rootfs,
	}
	if opts.Mirror != "" {
		args = append(args, opts.Mirror)
	}
	return args
}

func debootstrap(ctx context.Context, opts ManagedOptions, rootfs string, progress io.Writer) error {
	cmd := exec.CommandContext(ctx, opts.Debootstrap, debootstrapArgs(opts, rootfs)...)
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

// customize adds user (1000), its sudoers entry and /workspace, and drops
// what apt cached.
// It edits the tree from Go and runs nothing of it (no chroot useradd):
// the image's binaries never run as host root once debootstrap is done.
// Every path resolves inside the tree.
func customize(rootfs string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := addAccount(root, account{Name: "user", ID: 1000, Home: "/home/user", Shell: "/bin/bash"}, time.Now()); err != nil {
		return err
	}
	if err := root.Mkdir("workspace", 0o755); err != nil {
		return fmt.Errorf("create /workspace: %w", err)
	}
	if err := ownDir(root, "workspace", 1000, 0o755); err != nil {
		return fmt.Errorf("create /workspace: %w", err)
	}
	// sudo reads /etc/sudoers.d (Debian's /etc/sudoers includes it) and
	// refuses a file there that others may write; 0440 as visudo makes.
	if err := root.Mkdir(filepath.Dir(SudoersFile), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sudoers: %w", err)
	}
	if err := root.WriteFile(SudoersFile, []byte("user ALL=(ALL:ALL) NOPASSWD: ALL\n"), 0o440); err != nil {
		return fmt.Errorf("sudoers: %w", err)
	}
	if err := root.Chmod(SudoersFile, 0o440); err != nil {
		return fmt.Errorf("sudoers: %w", err)
	}
	if err := root.WriteFile("etc/hostname", []byte("sandbox\n"), 0o644); err != nil {
		return err
	}
	if err := root.Chmod("etc/hostname", 0o644); err != nil {
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
		matches, err := fs.Glob(root.FS(), pattern)
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := root.RemoveAll(m); err != nil {
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
