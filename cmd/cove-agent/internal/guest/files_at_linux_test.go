package guest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
)

// symlinkTree is a sandbox in miniature under a temporary directory: work
// belongs to uid 1000 (as /workspace does), etc and its files to root (as
// /etc/profile.d does), and work/cfg is a symlink to etc that uid 1000
// planted.
type symlinkTree struct {
	work, etc string
}

func newSymlinkTree(t *testing.T) symlinkTree {
	t.Helper()
	dir := t.TempDir()
	// uid 1000 must be able to walk from / to the tree, as in a sandbox.
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
	tr := symlinkTree{work: filepath.Join(dir, "work"), etc: filepath.Join(dir, "etc")}
	for _, d := range []string{tr.work, tr.etc} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.Chown(tr.work, 1000, 1000))
	must(t, os.WriteFile(filepath.Join(tr.etc, "existing.sh"), []byte("echo root\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(tr.etc, "secret"), []byte("root only\n"), 0o600))
	must(t, os.Symlink(tr.etc, filepath.Join(tr.work, "cfg")))
	must(t, os.Lchown(filepath.Join(tr.work, "cfg"), 1000, 1000))
	return tr
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// etcNames lists etc, to show that nothing appeared there.
func (tr symlinkTree) etcNames(t *testing.T) string {
	t.Helper()
	ents, err := os.ReadDir(tr.etc)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

// TestFilesUserSymlinkIsNotFollowedWithRootRights: a symlink that uid 1000
// planted leads no file call where uid 1000 may not go, whatever user the
// call names: writes, archives, mkdir, move, edit, remove and reads are
// all refused with permission_denied, and etc is left as it was.
func TestFilesUserSymlinkIsNotFollowedWithRootRights(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	ctx := t.Context()
	tr := newSymlinkTree(t)
	cfg := filepath.Join(tr.work, "cfg")
	before := tr.etcNames(t)
	denied := func(name string, err error) {
		t.Helper()
		if agentCode(err) != wire.CodePermissionDenied {
			t.Errorf("%s: %v, want permission_denied", name, err)
		} else if !strings.Contains(err.Error(), "symlink of uid 1000") {
			t.Errorf("%s: %v does not say which symlink", name, err)
		}
	}

	for _, uid := range []int{1000, 0} {
		_, _, err := c.WriteFile(ctx, client.WriteRequest{Path: cfg + "/x.sh", UID: uid, GID: uid, Mode: -1, Size: 5}, strings.NewReader("evil\n"))
		denied(fmt.Sprintf("write as uid %d", uid), err)
		_, _, err = c.WriteFile(ctx, client.WriteRequest{Path: cfg + "/existing.sh", UID: uid, GID: uid, Mode: -1, Size: 5}, strings.NewReader("evil\n"))
		denied(fmt.Sprintf("overwrite as uid %d", uid), err)
		_, _, err = c.WriteFile(ctx, client.WriteRequest{Path: cfg + "/new/x.sh", UID: uid, GID: uid, Mode: -1, Size: 5}, strings.NewReader("evil\n"))
		denied(fmt.Sprintf("write with a new parent as uid %d", uid), err)
		tgz := makeTar(t, []tarEntry{{name: "x.sh", typ: tar.TypeReg, body: "evil\n"}})
		_, err = c.WriteArchive(ctx, cfg, uid, uid, bytes.NewReader(tgz))
		denied(fmt.Sprintf("archive into the link as uid %d", uid), err)
		_, err = c.WriteArchive(ctx, cfg+"/sub", uid, uid, bytes.NewReader(tgz))
		denied(fmt.Sprintf("archive below the link as uid %d", uid), err)
		_, err = c.Mkdir(ctx, wire.MkdirRequest{Path: cfg + "/d", UID: uid, GID: uid})
		denied(fmt.Sprintf("mkdir as uid %d", uid), err)
	}
	must(t, os.WriteFile(filepath.Join(tr.work, "mine.sh"), []byte("mine\n"), 0o644))
	must(t, os.Chown(filepath.Join(tr.work, "mine.sh"), 1000, 1000))
	_, err := c.MoveFile(ctx, wire.MoveRequest{From: filepath.Join(tr.work, "mine.sh"), To: cfg + "/moved.sh", UID: 1000, GID: 1000})
	denied("move into", err)
	_, err = c.MoveFile(ctx, wire.MoveRequest{From: cfg + "/existing.sh", To: filepath.Join(tr.work, "stolen.sh"), UID: 1000, GID: 1000})
	denied("move out of", err)
	_, err = c.EditFile(ctx, wire.EditRequest{Path: cfg + "/existing.sh", Edits: []wire.FileEdit{{Old: "root", New: "evil"}}})
	denied("edit", err)
	err = c.RemoveFile(ctx, cfg+"/existing.sh", false)
	denied("remove", err)
	_, err = c.ReadFile(ctx, cfg+"/secret", http.Header{})
	denied("read", err)

	// An archive into the folder whose entries go through the link.
	tgz := makeTar(t, []tarEntry{{name: "cfg/x.sh", typ: tar.TypeReg, body: "evil\n"}})
	if _, err := c.WriteArchive(ctx, tr.work, 1000, 1000, bytes.NewReader(tgz)); agentCode(err) != wire.CodeConflict {
		t.Errorf("archive through the link: %v, want conflict", err)
	}

	if got := tr.etcNames(t); got != before {
		t.Errorf("etc holds %q, was %q", got, before)
	}
	if b, _ := os.ReadFile(filepath.Join(tr.etc, "existing.sh")); string(b) != "echo root\n" {
		t.Errorf("etc/existing.sh is %q", b)
	}
	if ents, _ := os.ReadDir(tr.work); len(ents) != 2 {
		t.Errorf("work holds %v, want cfg and mine.sh", ents)
	}
	// Removing the link removes the link, not what it points to.
	if err := c.RemoveFile(ctx, cfg, false); err != nil {
		t.Errorf("remove the link itself: %v", err)
	}
	if got := tr.etcNames(t); got != before {
		t.Errorf("after removing the link etc holds %q", got)
	}
}

// TestFilesSymlinksThatStillWork: what a user may do through its own
// symlinks, and what root's symlinks lead to, still works.
func TestFilesSymlinksThatStillWork(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	ctx := t.Context()
	tr := newSymlinkTree(t)
	write := func(p string, uid int, body string) error {
		_, _, err := c.WriteFile(ctx, client.WriteRequest{Path: p, UID: uid, GID: uid, Mode: -1, Size: int64(len(body))}, strings.NewReader(body))
		return err
	}
	// A user's symlink to its own directory: writes and archives go through
	// with its rights, owned by it.
	real := filepath.Join(tr.work, "real")
	must(t, os.Mkdir(real, 0o755))
	must(t, os.Chown(real, 1000, 1000))
	link := filepath.Join(tr.work, "l")
	must(t, os.Symlink("real", link))
	must(t, os.Lchown(link, 1000, 1000))
	if err := write(link+"/sub/new.txt", 1000, "through my link\n"); err != nil {
		t.Errorf("write through the user's own link: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(real, "sub/new.txt")); err != nil || statOf(fi).Uid != 1000 {
		t.Errorf("file through the user's link: %v", err)
	}
	tgz := makeTar(t, []tarEntry{{name: "a/b.txt", typ: tar.TypeReg, body: "b"}})
	if _, err := c.WriteArchive(ctx, link+"/unpacked", 1000, 1000, bytes.NewReader(tgz)); err != nil {
		t.Errorf("archive through the user's own link: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(real, "unpacked/a/b.txt")); string(b) != "b" {
		t.Errorf("extracted through the user's link: %q", b)
	}

	// Root's symlink into etc: a write as the default user writes the file
	// it points to, keeping its owner; so does one as root.
	hostname := filepath.Join(tr.etc, "hostname")
	must(t, os.WriteFile(hostname, []byte("old\n"), 0o644))
	must(t, os.Symlink(hostname, filepath.Join(tr.work, "h")))
	if err := write(filepath.Join(tr.work, "h"), 1000, "written-through\n"); err != nil {
		t.Errorf("write through root's link: %v", err)
	}
	if b, _ := os.ReadFile(hostname); string(b) != "written-through\n" {
		t.Errorf("etc/hostname is %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(tr.work, "h")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v", err)
	}
	// Root writes in etc directly.
	if err := write(filepath.Join(tr.etc, "root.sh"), 0, "root\n"); err != nil {
		t.Errorf("root write in etc: %v", err)
	}
	// A dangling symlink of the user is replaced by the file, in its own
	// directory.
	dangling := filepath.Join(tr.work, "dangling")
	must(t, os.Symlink(filepath.Join(tr.etc, "nothing.sh"), dangling))
	must(t, os.Lchown(dangling, 1000, 1000))
	if err := write(dangling, 1000, "replaced\n"); err != nil {
		t.Errorf("write over a dangling link: %v", err)
	}
	if fi, err := os.Lstat(dangling); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the dangling link was not replaced: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(tr.etc, "nothing.sh")); err == nil {
		t.Errorf("a write over a dangling link created its target")
	}
}

// TestFilesMagicLinks: symlinks of /proc that jump to what a process holds
// are not followed, even root's.
func TestFilesMagicLinks(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	ctx := t.Context()
	for _, p := range []string{"/proc/self/root/etc/hostname", "/proc/self/cwd", "/proc/1/root/etc"} {
		if _, err := c.StatFile(ctx, p+"/x"); agentCode(err) != wire.CodePermissionDenied {
			t.Errorf("stat through %s: %v", p, err)
		}
	}
	if _, err := c.ReadFile(ctx, "/proc/self/root/etc/hostname", http.Header{}); agentCode(err) != wire.CodePermissionDenied {
		t.Errorf("read through /proc/self/root: %v", err)
	}
	// /proc/self itself is a plain name.
	fc, err := c.ReadFile(ctx, "/proc/self/comm", http.Header{})
	if err != nil {
		t.Fatalf("read /proc/self/comm: %v", err)
	}
	io.Copy(io.Discard, fc.Body)
	fc.Body.Close()
}

// TestFileCallThreadIsNotReused: the thread whose rights a call lowered
// ends with the call; no other call can run with them.
func TestFileCallThreadIsNotReused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change file system ids")
	}
	var tid int
	err := inCall(func(c *fsCall) error {
		tid = unix.Gettid()
		return c.follow(1000, 1000, "/test/link")
	})
	if err != nil {
		t.Fatal(err)
	}
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	for range 1000 {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := os.Stat(task); err == nil {
		t.Errorf("thread %d lives on after its rights were lowered", tid)
	}
	// A call that did not lower them keeps the agent's.
	err = inCall(func(c *fsCall) error {
		if uid, _ := unix.SetfsuidRetUid(-1); uid != 0 {
			return fmt.Errorf("fsuid %d", uid)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
