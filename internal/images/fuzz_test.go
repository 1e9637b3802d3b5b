package images

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	it "github.com/cove-dev/cove/internal/images/imagetest"
)

// FuzzApply feeds arbitrary bytes to the layer unpacker as a layer's tar:
// whatever it does with them, nothing may appear beside the image's root.
func FuzzApply(f *testing.F) {
	f.Add(it.Tar(f, it.Dir("a", 0o755), it.File("a/f", "x", 0o644), it.Whiteout("a/f"), it.Opaque("a")))
	f.Add(it.Tar(f, it.Symlink("esc", "/"), it.File("esc/pwned", "x", 0o644)))
	f.Add(it.Tar(f, it.Symlink("up", "../.."), it.File("up/pwned", "x", 0o644), it.Whiteout("up/x")))
	f.Add(it.Tar(f, it.Entry{Name: "hl", Type: tar.TypeLink, Link: "../x"}, it.File("../y", "", 0o644)))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, b []byte) {
		base := t.TempDir()
		rootfs := filepath.Join(base, "rootfs")
		if err := os.Mkdir(rootfs, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(rootfs)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		u := &unpacker{root: root, policy: Policy{AllowedSetID: DefaultAllowedSetID, MaxBytes: 1 << 20, MaxID: 65536}}
		_ = u.apply(bytes.NewReader(b))
		ents, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 {
			t.Fatalf("the unpacker wrote beside the root: %v", ents)
		}
	})
}
