// Package xattrs runs `cove serve` and checks the user.* extended
// attributes that file calls read and write, on a real sandbox: runc, its
// overlay root (the image below, the sandbox's own disk above) and its
// user namespace. What a sandbox's user or root sets shows on cove's file
// entries within the bounds; trusted.* and security.* are out of reach
// from inside; a write through cove's API makes a new file without them.
package xattrs

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/fspath"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

func TestXattrsOnTheSandboxOverlay(t *testing.T) {
	s := e2etest.StartServer(t, e2etest.WithManaged)
	c := s.NewTeam("xattrs")
	sb := e2etest.Create(t, c, api.CreateSandboxRequest{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	py := func(code string, opts ...func(*api.CreateCommandRequest)) string {
		t.Helper()
		r := e2etest.Sh(t, c, sb.ID, "python3 -c '"+code+"' 2>&1", opts...)
		return r.Stdout
	}

	// As the sandbox's user, on its own disk (the overlay's upper layer).
	if out := py(`import os
os.makedirs("/tmp/xa", exist_ok=True)
open("/tmp/xa/f", "w").write("hi")
os.setxattr("/tmp/xa/f", "user.e2b.author", b"mish")
os.setxattr("/tmp/xa/f", "user.note", b"a note")
os.setxattr("/tmp/xa", "user.dir", b"d")
print("set")`); out != "set\n" {
		t.Fatalf("setting xattrs as user: %q", out)
	}
	want := map[string]string{"user.e2b.author": "mish", "user.note": "a note"}
	e, err := c.StatFile(ctx, sb.ID, "/tmp/xa/f")
	if err != nil || !maps.Equal(e.Xattrs, want) {
		t.Errorf("stat: %v, %v", e.Xattrs, err)
	}
	l, err := c.ListFiles(ctx, sb.ID, "/tmp/xa", 1, 0, "")
	if err != nil || len(l.Items) != 1 || !maps.Equal(l.Items[0].Xattrs, want) {
		t.Errorf("list: %+v, %v", l.Items, err)
	}
	if d, err := c.StatFile(ctx, sb.ID, "/tmp/xa"); err != nil || d.Xattrs["user.dir"] != "d" {
		t.Errorf("a directory: %v, %v", d.Xattrs, err)
	}
	// A file of the image (the lower layer) shows none of the overlay's
	// own attributes.
	if e, err := c.StatFile(ctx, sb.ID, "/etc/os-release"); err != nil || e.Xattrs != nil {
		t.Errorf("an image file: %v, %v", e.Xattrs, err)
	}

	// Neither user nor sandbox root sets trusted.* or security.*.
	hostile := `import os
for n in ("trusted.overlay.opaque", "trusted.x", "security.x", "security.capability"):
    try:
        os.setxattr("/tmp/xa/f", n, b"y")
        print("set", n)
    except OSError as e:
        print("refused", n)`
	for _, as := range []struct {
		name string
		opts []func(*api.CreateCommandRequest)
	}{{"user", nil}, {"root", []func(*api.CreateCommandRequest){e2etest.AsRoot}}} {
		if out := py(hostile, as.opts...); strings.Contains(out, "set ") || strings.Count(out, "refused") != 4 {
			t.Errorf("as %s: %q", as.name, out)
		}
	}

	// The bound: of 40 attributes, 32 are shown.
	py(`import os
for i in range(40):
    os.setxattr("/tmp/xa/many", "user.k%02d" % i, b"v") if os.path.exists("/tmp/xa/many") else (open("/tmp/xa/many", "w").close(), os.setxattr("/tmp/xa/many", "user.k%02d" % i, b"v"))`)
	if e, err := c.StatFile(ctx, sb.ID, "/tmp/xa/many"); err != nil || len(e.Xattrs) != fspath.MaxXattrs || e.Xattrs["user.k00"] != "v" {
		t.Errorf("bounded: %d, %v", len(e.Xattrs), err)
	}

	// A write through cove's API is a new file, without them.
	w, err := c.WriteFile(ctx, sb.ID, "/tmp/xa/f", strings.NewReader("new"))
	if err != nil || w.Xattrs != nil {
		t.Errorf("write: %v, %v", w.Xattrs, err)
	}
	if out := py(`import os; print(sorted(os.listxattr("/tmp/xa/f")))`); out != "[]\n" {
		t.Errorf("after the write the sandbox sees %q", out)
	}
}
