package saves

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/api"
)

func TestSaveRestoreSparse(t *testing.T) {
	dir := t.TempDir()
	st, err := NewDir(filepath.Join(dir, "saves"))
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "disk.img")
	f, _ := os.Create(img)
	f.Truncate(64 << 20)
	data := make([]byte, 3<<20)
	rand.Read(data)
	f.WriteAt(data, 5<<20)              // a data extent in the middle
	f.WriteAt([]byte("tail"), 64<<20-4) // and at the very end
	f.Close()

	m, err := st.Save(t.Context(), "sbx_a", img)
	if err != nil {
		t.Fatal(err)
	}
	if m.DiskBytes != 64<<20 || m.DataBytes >= 16<<20 || m.DataBytes < 3<<20 {
		t.Errorf("manifest %+v: want the apparent size and only the data extents", m)
	}
	out := filepath.Join(dir, "restored.img")
	if _, err := st.Restore(t.Context(), "sbx_a", out); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(img)
	got, _ := os.ReadFile(out)
	if !bytes.Equal(want, got) {
		t.Fatal("restored image differs")
	}

	// A corrupted archive is refused and leaves no file behind.
	arch := filepath.Join(dir, "saves", "sbx_a", archiveName)
	b, _ := os.ReadFile(arch)
	b[len(b)/2] ^= 0xff
	os.WriteFile(arch, b, 0o600)
	out2 := filepath.Join(dir, "again.img")
	if _, err := st.Restore(t.Context(), "sbx_a", out2); err == nil {
		t.Error("a corrupted save restored")
	}
	if _, err := os.Stat(out2); !os.IsNotExist(err) {
		t.Error("a failed restore left its file")
	}

	if err := st.Delete(t.Context(), "sbx_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Stat(t.Context(), "sbx_a"); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("stat after delete: %v", err)
	}
	// A save without a manifest (interrupted) is not complete.
	os.MkdirAll(filepath.Join(dir, "saves", "sbx_b"), 0o700)
	os.WriteFile(filepath.Join(dir, "saves", "sbx_b", archiveName), []byte("partial"), 0o600)
	if _, err := st.Stat(t.Context(), "sbx_b"); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("an incomplete save: %v", err)
	}
}
