package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
	"github.com/cove-dev/cove/internal/fspath"
)

// TestFileXattrs: a write sets the user.* extended attributes it names
// and no others (the old content's go), stat, list, move and mkdir report
// them, an edit keeps them, and what is set out of band is reported
// within the bounds.
func TestFileXattrs(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	ctx := t.Context()
	dir := t.TempDir()
	p := filepath.Join(dir, "f.txt")
	write := func(x map[string]string, body string) (wire.FileInfo, error) {
		fi, _, err := c.WriteFile(ctx, client.WriteRequest{Path: p, UID: 1000, GID: 1000, Mode: -1, Size: int64(len(body)), Xattrs: x}, strings.NewReader(body))
		return fi, err
	}
	meta := map[string]string{"user.e2b.author": "mish", "user.e2b.purpose": "upload"}
	fi, err := write(meta, "one")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(meta, fi.Xattrs); diff != "" {
		t.Errorf("write answer (-want +got):\n%s", diff)
	}
	buf := make([]byte, 64)
	if n, err := unix.Getxattr(p, "user.e2b.author", buf); err != nil || string(buf[:n]) != "mish" {
		t.Errorf("on disk: %d, %v", n, err)
	}
	st, err := c.StatFile(ctx, p)
	if err != nil || !cmp.Equal(st.Xattrs, meta) {
		t.Errorf("stat: %v, %v", st.Xattrs, err)
	}
	l, err := c.ListFiles(ctx, client.ListRequest{Path: dir})
	if err != nil || len(l.Items) != 1 || !cmp.Equal(l.Items[0].Xattrs, meta) {
		t.Errorf("list: %+v, %v", l.Items, err)
	}

	// An edit keeps them; a move carries them.
	if fi, err := c.EditFile(ctx, wire.EditRequest{Path: p, Edits: []wire.FileEdit{{Old: "one", New: "two"}}}); err != nil || !cmp.Equal(fi.Xattrs, meta) {
		t.Errorf("edit: %v, %v", fi.Xattrs, err)
	}
	moved := filepath.Join(dir, "g.txt")
	if fi, err := c.MoveFile(ctx, wire.MoveRequest{From: p, To: moved}); err != nil || !cmp.Equal(fi.Xattrs, meta) {
		t.Errorf("move: %v, %v", fi.Xattrs, err)
	}
	if _, err := c.MoveFile(ctx, wire.MoveRequest{From: moved, To: p}); err != nil {
		t.Fatal(err)
	}

	// A write without them clears them.
	if fi, err := write(nil, "three"); err != nil || fi.Xattrs != nil {
		t.Errorf("write without: %v, %v", fi.Xattrs, err)
	}
	if st, err := c.StatFile(ctx, p); err != nil || st.Xattrs != nil {
		t.Errorf("stat after write without: %v, %v", st.Xattrs, err)
	}

	// Directories have them too; symlinks never.
	sub := filepath.Join(dir, "sub")
	if _, err := c.Mkdir(ctx, wire.MkdirRequest{Path: sub}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(sub, "user.tag", []byte("d"), 0); err != nil {
		t.Fatal(err)
	}
	if st, err := c.StatFile(ctx, sub); err != nil || st.Xattrs["user.tag"] != "d" {
		t.Errorf("dir: %v, %v", st.Xattrs, err)
	}
	if err := os.Symlink("f.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if st, err := c.StatFile(ctx, filepath.Join(dir, "link")); err != nil || st.Xattrs != nil {
		t.Errorf("symlink: %v, %v", st.Xattrs, err)
	}

	// Set out of band: only user.* names, sorted, within the bounds; a
	// value too large and a trusted.* name are left out. tmpfs keeps
	// values larger than ext4's one block, so the byte bound is tried
	// there.
	shm, err := os.MkdirTemp("/dev/shm", "cove-xattr-")
	if err != nil {
		t.Skipf("no /dev/shm for large extended attributes: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	oob := filepath.Join(shm, "oob")
	if err := os.WriteFile(oob, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range fspath.MaxXattrs + 5 {
		if err := unix.Setxattr(oob, fmt.Sprintf("user.k%02d", i), []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Setxattr(oob, "user.a-big", []byte(strings.Repeat("x", fspath.MaxXattrBytes)), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(oob, "trusted.hidden", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	st, err = c.StatFile(ctx, oob)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Xattrs) != fspath.MaxXattrs || st.Xattrs["user.k00"] != "v" || st.Xattrs["user.a-big"] != "" || st.Xattrs["trusted.hidden"] != "" {
		t.Errorf("out of band: %d %v", len(st.Xattrs), st.Xattrs)
	}
	// Within the count, the bytes bound: the first fits, the next not.
	big := filepath.Join(shm, "big")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, n := range map[string]int{"user.a": 3000, "user.b": 2000, "user.c": 10} {
		if err := unix.Setxattr(big, name, []byte(strings.Repeat("x", n)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := c.StatFile(ctx, big); err != nil || len(st.Xattrs) != 2 || len(st.Xattrs["user.a"]) != 3000 || len(st.Xattrs["user.c"]) != 10 {
		t.Errorf("bytes bound: %d names, %v", len(st.Xattrs), err)
	}
}

// TestFileXattrsRefused: names outside user.*, and sets beyond the
// bounds, are refused by the agent (not only by its client), and nothing
// is written.
func TestFileXattrsRefused(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	dir := t.TempDir()
	many := map[string]string{}
	for i := range fspath.MaxXattrs + 1 {
		many[fmt.Sprintf("user.k%d", i)] = "v"
	}
	for name, x := range map[string]map[string]string{
		"trusted":   {"trusted.overlay.opaque": "y"},
		"security":  {"security.capability": "x"},
		"system":    {"system.posix_acl_access": "x"},
		"bare user": {"user.": "x"},
		"no prefix": {"author": "x"},
		"too many":  many,
		"too big":   {"user.big": strings.Repeat("x", fspath.MaxXattrBytes)},
		"long name": {"user." + strings.Repeat("n", 300): "x"},
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			raw, err := json.Marshal(x)
			if err != nil {
				t.Fatal(err)
			}
			// The agent's own check, past the client's.
			var e *Error
			if _, err := parseXattrs(string(raw)); !errors.As(err, &e) || e.Status != 400 || e.Code != wire.CodeInvalidArgument {
				t.Errorf("agent: %v", err)
			}
			if _, _, err := c.WriteFile(t.Context(), client.WriteRequest{Path: p, Mode: -1, Size: 1, Xattrs: x}, strings.NewReader("d")); agentCode(err) != wire.CodeInvalidArgument {
				t.Errorf("client: %v", err)
			}
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Errorf("%s was written: %v", p, err)
			}
		})
	}
}
