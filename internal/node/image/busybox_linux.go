package image

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// BusyboxPath is where the static busybox of Debian's busybox-static lives.
const BusyboxPath = "/bin/busybox"

// BuildBusybox returns the busybox image called name under imagesDir,
// building it when absent: a static /bin/busybox with a symlink per applet,
// root and user (1000) in /etc/passwd and /etc/group, /home/user,
// /workspace, /tmp, and empty /proc, /sys and /dev. It takes a fraction of
// a second and is meant for tests.
func BuildBusybox(ctx context.Context, imagesDir, name string) (Image, error) {
	return ensure(ctx, imagesDir, name, slog.New(slog.DiscardHandler), buildBusybox)
}

func buildBusybox(ctx context.Context, rootfs string) ([]string, error) {
	list, err := exec.CommandContext(ctx, BusyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets: %w", err)
	}
	dirs := []struct {
		path string
		mode uint32
		uid  int
	}{
		{"bin", 0o755, 0},
		{"etc", 0o755, 0},
		{"root", 0o700, 0},
		{"home", 0o755, 0},
		{"home/user", 0o755, 1000},
		{"workspace", 0o755, 1000},
		{"tmp", 0o1777, 0},
		{"proc", 0o555, 0},
		{"sys", 0o555, 0},
		{"dev", 0o755, 0},
		{"usr", 0o755, 0},
		{"usr/bin", 0o755, 0},
		{"sbin", 0o755, 0},
		{"var", 0o755, 0},
		{"var/tmp", 0o1777, 0},
	}
	for _, d := range dirs {
		p := filepath.Join(rootfs, d.path)
		if err := os.Mkdir(p, 0o700); err != nil {
			return nil, err
		}
		// Raw mode bits: Mkdir is subject to the umask.
		if err := unix.Chmod(p, d.mode); err != nil {
			return nil, fmt.Errorf("chmod %s: %w", p, err)
		}
		if err := os.Lchown(p, d.uid, d.uid); err != nil {
			return nil, err
		}
	}
	if err := copyFile(BusyboxPath, filepath.Join(rootfs, "bin/busybox"), 0o755); err != nil {
		return nil, fmt.Errorf("copy busybox: %w", err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" || strings.ContainsRune(applet, '/') {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", applet)); err != nil {
			return nil, err
		}
	}
	if _, err := os.Lstat(filepath.Join(rootfs, "bin/sh")); err != nil {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin/sh")); err != nil {
			return nil, err
		}
	}
	files := []struct {
		path, text string
		mode       os.FileMode
	}{
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", 0o644},
		{"etc/group", "root:x:0:\ntty:x:5:\nuser:x:1000:\nnogroup:x:65534:\n", 0o644},
		{"etc/hostname", "sandbox\n", 0o644},
		{"etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost\n", 0o644},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(rootfs, f.path), []byte(f.text), f.mode); err != nil {
			return nil, err
		}
	}
	return []string{"/bin/sh", "-c"}, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	b = bytes.TrimRight(b, "\n")
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			if n--; n == 0 {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}
