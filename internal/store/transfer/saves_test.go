package transfer

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/saves"
	"github.com/cove-dev/cove/internal/testsupport/s3server"
)

// newSaves is a source directory of saves and a target bucket over a
// fresh versitygw.
func newSaves(t *testing.T) (*saves.Dir, saves.Store, *s3server.Server) {
	t.Helper()
	srv := s3server.Start(t)
	srv.Env(t)
	to, err := saves.Open(t.Context(), srv.PrefixURL("cove"), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { to.Close() })
	from, err := saves.NewDir(filepath.Join(t.TempDir(), "saves"))
	if err != nil {
		t.Fatal(err)
	}
	return from, to, srv
}

// writeSave saves a sparse disk with some data, and an output directory
// when withOutput, as the generation gen of id in st.
func writeSave(t *testing.T, st saves.Store, id, gen string, withOutput bool) saves.Manifest {
	t.Helper()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.img")
	f, err := os.Create(disk)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(32 << 20)
	data := make([]byte, 1<<20)
	rand.Read(data)
	f.WriteAt(data, 3<<20)
	f.Close()
	files := saves.Files{Disk: disk}
	if withOutput {
		files.Output = filepath.Join(dir, "output")
		os.MkdirAll(filepath.Join(files.Output, "cmd_1"), 0o700)
		os.WriteFile(filepath.Join(files.Output, "cmd_1", "stdout"), []byte("hello from before the move\n"), 0o600)
	}
	m, err := st.Save(t.Context(), id, gen, files)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}

// restoreSums restores a save and returns the sums of its disk and of
// its output's stdout ("" when it has none).
func restoreSums(t *testing.T, st saves.Store, id, gen string) (disk, stdout string) {
	t.Helper()
	dir := t.TempDir()
	files := saves.Files{Disk: filepath.Join(dir, "disk.img"), Output: filepath.Join(dir, "output")}
	m, err := st.Restore(t.Context(), id, gen, files)
	if err != nil {
		t.Fatalf("restore %s %s: %v", id, gen, err)
	}
	if m.HasOutput() {
		stdout = sum(t, filepath.Join(files.Output, "cmd_1", "stdout"))
	}
	return sum(t, files.Disk), stdout
}

// TestMoveSaves: a save moves from a directory into the bucket under its
// own generation, its disk and recorded output byte for byte; moving it
// again keeps what the bucket has; a save missing from the source is
// named before anything moves.
func TestMoveSaves(t *testing.T) {
	ctx := t.Context()
	from, to, _ := newSaves(t)
	withOut := writeSave(t, from, "sbx_out", "0-1700000000000000000", true)
	diskOnly := writeSave(t, from, "cache_1", "0-1700000000000000001", false)

	want := []saved{{id: "sbx_out", sandbox: true}, {id: "cache_1"}, {id: "sbx_gone", sandbox: true}}
	_, err := statSaves(ctx, from, want)
	if api.ErrorCode(err) != api.CodePreconditionFailed || !strings.Contains(err.Error(), "sbx_gone") {
		t.Fatalf("statSaves with a missing save = %v; want precondition_failed naming sbx_gone", err)
	}
	found, err := statSaves(ctx, from, want[:2])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []saves.Manifest{withOut, diskOnly} {
		id := m.SandboxID
		moved, err := moveSave(ctx, from, to, id, found[id], t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if moved.Generation != m.Generation {
			t.Errorf("%s moved as generation %q, want %q", id, moved.Generation, m.Generation)
		}
		wantDisk, wantOut := restoreSums(t, from, id, m.Generation)
		gotDisk, gotOut := restoreSums(t, to, id, m.Generation)
		if gotDisk != wantDisk || gotOut != wantOut {
			t.Errorf("%s: the moved save restores disk %s output %q, want %s %q", id, gotDisk, gotOut, wantDisk, wantOut)
		}
		// The newest save, as a node waking without a generation finds it.
		if _, err := to.Stat(ctx, id, ""); err != nil {
			t.Errorf("%s: newest save in the target: %v", id, err)
		}
	}
	// Run again: the bucket's save is kept, not written again.
	before, _ := to.Stat(ctx, "sbx_out", withOut.Generation)
	again, err := moveSave(ctx, from, to, "sbx_out", found["sbx_out"], t.TempDir())
	if err != nil || !again.CreatedAt.Equal(before.CreatedAt) {
		t.Fatalf("a second move = %+v, %v; want the save already there (%v)", again, err, before.CreatedAt)
	}
}
