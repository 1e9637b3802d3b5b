package image

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeDebootstrap writes a debootstrap that records its arguments in
// argsFile and fails, so no build gets past it.
func fakeDebootstrap(t *testing.T, argsFile string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "debootstrap")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + argsFile + "\nexit 3\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestManagedRefusesWithoutKeyring: without the archive keyring the
// managed build stops before debootstrap runs, and leaves no image.
func TestManagedRefusesWithoutKeyring(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	images := filepath.Join(dir, "images")
	for _, keyring := range []string{filepath.Join(dir, "missing.gpg"), dir} {
		_, err := EnsureManagedWith(t.Context(), images, ManagedOptions{
			Keyring: keyring, Debootstrap: fakeDebootstrap(t, argsFile),
		}, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "keyring") {
			t.Errorf("keyring %s: err = %v, want a refusal naming the keyring", keyring, err)
		}
		if _, err := os.Stat(argsFile); err == nil {
			t.Fatalf("keyring %s: debootstrap ran", keyring)
		}
	}
	if imgs, err := List(images); err != nil || len(imgs) != 0 {
		t.Errorf("images after refused builds: %v, %v", imgs, err)
	}
}

// TestManagedChecksSignatures: debootstrap gets the keyring and
// --force-check-gpg, so an unsigned archive fails the build.
func TestManagedChecksSignatures(t *testing.T) {
	dir := t.TempDir()
	keyring := filepath.Join(dir, "archive.gpg")
	if err := os.WriteFile(keyring, []byte("keys"), 0o644); err != nil {
		t.Fatal(err)
	}
	argsFile := filepath.Join(dir, "args")
	_, err := EnsureManagedWith(t.Context(), filepath.Join(dir, "images"), ManagedOptions{
		Keyring: keyring, Debootstrap: fakeDebootstrap(t, argsFile),
	}, nil, nil)
	if err == nil {
		t.Fatal("a failed debootstrap built an image")
	}
	b, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatalf("debootstrap did not run: %v", err)
	}
	args := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, want := range []string{"--keyring=" + keyring, "--force-check-gpg"} {
		if !slices.Contains(args, want) {
			t.Errorf("debootstrap args %q lack %s", args, want)
		}
	}
	if got := debootstrapArgs(ManagedOptions{Keyring: "/k"}, "/r"); !slices.Contains(got, "--keyring=/k") || !slices.Contains(got, "--force-check-gpg") {
		t.Errorf("debootstrapArgs = %q", got)
	}
}

// debianTree makes a small tree shaped like debootstrap's: account files
// with Debian's modes, /etc/skel, a /bin/sh, and a /usr/sbin/useradd that
// is a trap: run (in a chroot, as the builder once did), it leaves
// /trapped in the tree.
func debianTree(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the tree's files belong to several users")
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	files := []struct {
		name    string
		content string
		mode    os.FileMode
		gid     int
	}{
		{"etc/passwd", "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", 0o644, 0},
		{"etc/group", "root:x:0:\nshadow:x:42:\nusers:x:100:\n", 0o644, 0},
		{"etc/shadow", "root:*:19000:0:99999:7:::\n", 0o640, 42},
		{"etc/gshadow", "root:*::\n", 0o640, 42},
		{"etc/subuid", "", 0o644, 0},
		{"etc/subgid", "other:100000:65536\n", 0o644, 0},
		{"etc/hostname", "build-host\n", 0o644, 0},
		{"etc/skel/.bashrc", "# bashrc\n", 0o644, 0},
		{"etc/skel/.config/app.conf", "x=1\n", 0o600, 0},
		{"usr/sbin/useradd", "#!/bin/sh\necho trapped > /trapped\n", 0o755, 0},
		{"usr/sbin/chpasswd", "#!/bin/sh\necho trapped > /trapped\n", 0o755, 0},
	}
	for _, f := range files {
		p := filepath.Join(root, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.content), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, 0, f.gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"home", "bin", "var/log"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if bb, err := os.ReadFile(BusyboxPath); err == nil {
		if err := os.WriteFile(filepath.Join(root, "bin/sh"), bb, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestCustomizeExecutesNothingOfTheImage: the account of user is set up
// by editing the tree: a trapped useradd in the tree never runs, and the
// result is what useradd would have written.
func TestCustomizeExecutesNothingOfTheImage(t *testing.T) {
	root := debianTree(t)
	if err := customize(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(root, "trapped")); err == nil {
		t.Fatal("customize ran a binary of the image")
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, c := range []struct{ file, line string }{
		{"etc/passwd", "user:x:1000:1000::/home/user:/bin/bash\n"},
		{"etc/group", "user:x:1000:\n"},
		{"etc/shadow", "user:!:"},
		{"etc/gshadow", "user:!::\n"},
		{"etc/subuid", "user:100000:65536\n"},
		{"etc/subgid", "user:165536:65536\n"},
	} {
		if got := read(c.file); !strings.Contains(got, c.line) {
			t.Errorf("%s = %q, want a line %q", c.file, got, c.line)
		}
	}
	if got := read("etc/passwd"); !strings.HasPrefix(got, "root:x:0:0:") {
		t.Errorf("etc/passwd lost its entries: %q", got)
	}
	if got := read("etc/hostname"); got != "sandbox\n" {
		t.Errorf("etc/hostname = %q", got)
	}
	if got := read(SudoersFile); got != "user ALL=(ALL:ALL) NOPASSWD: ALL\n" {
		t.Errorf("%s = %q", SudoersFile, got)
	}
	for _, c := range []struct {
		name     string
		mode     os.FileMode
		uid, gid uint32
	}{
		{"etc/shadow", 0o640, 0, 42},
		{"etc/passwd", 0o644, 0, 0},
		{"home/user", os.ModeDir | 0o755, 1000, 1000},
		{"home/user/.bashrc", 0o644, 1000, 1000},
		{"home/user/.config", os.ModeDir | 0o755, 1000, 1000},
		{"home/user/.config/app.conf", 0o600, 1000, 1000},
		{"workspace", os.ModeDir | 0o755, 1000, 1000},
		// sudo ignores a sudoers file others may write or root does not own.
		{SudoersFile, 0o440, 0, 0},
	} {
		st, err := os.Lstat(filepath.Join(root, c.name))
		if err != nil {
			t.Error(err)
			continue
		}
		sys := st.Sys().(*syscall.Stat_t)
		if st.Mode() != c.mode || sys.Uid != c.uid || sys.Gid != c.gid {
			t.Errorf("%s: %v %d:%d, want %v %d:%d", c.name, st.Mode(), sys.Uid, sys.Gid, c.mode, c.uid, c.gid)
		}
	}
	// A second run finds user there and refuses rather than adding twice.
	if err := addAccount(mustRoot(t, root), account{Name: "user", ID: 1000, Home: "/home/user2", Shell: "/bin/sh"}, testNow); err == nil {
		t.Error("a second user called user was added")
	}
}

// TestCustomizeStaysInTheTree: a symlink in the tree that leads to a host
// file fails the build; the host file is untouched.
func TestCustomizeStaysInTheTree(t *testing.T) {
	for _, name := range []string{"etc/shadow", "etc/hostname", "etc/skel"} {
		t.Run(name, func(t *testing.T) {
			root := debianTree(t)
			victim := filepath.Join(t.TempDir(), "victim")
			if err := os.Mkdir(victim, 0o755); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(victim, "file")
			if err := os.WriteFile(target, []byte("host\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if name == "etc/skel" {
				target = victim
			}
			if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
				t.Fatal(err)
			}
			if err := customize(root); err == nil {
				t.Error("customize followed a symlink out of the tree")
			}
			entries, _ := os.ReadDir(victim)
			b, _ := os.ReadFile(filepath.Join(victim, "file"))
			if len(entries) != 1 || string(b) != "host\n" {
				t.Errorf("host files changed: %v %q", entries, b)
			}
		})
	}
}

var testNow = time.Unix(1_700_000_000, 0)

func mustRoot(t *testing.T, dir string) *os.Root {
	t.Helper()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
