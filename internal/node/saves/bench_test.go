package saves

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSaveRestore saves and restores a 4 GiB sparse disk holding
// 100 MiB of random bytes (as cove bench's sleep and wake do), beside
// the baseline of tar | zstd -T0 of the same bytes into a synced file and
// zstd -d | tar back, in the same run.
func BenchmarkSaveRestore(b *testing.B) {
	dir := b.TempDir()
	disk := filepath.Join(dir, "disk.img")
	f, err := os.Create(disk)
	if err != nil {
		b.Fatal(err)
	}
	f.Truncate(4 << 30)
	data := make([]byte, 100<<20)
	rand.Read(data)
	f.WriteAt(data, 1<<30)
	f.Close()
	os.WriteFile(filepath.Join(dir, "raw"), data, 0o600)
	st, err := NewDir(filepath.Join(dir, "saves"))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("save", func(b *testing.B) {
		b.SetBytes(100 << 20)
		for i := 0; i < b.N; i++ {
			if _, err := st.Save(b.Context(), "sbx_bench", Generation(0, time.Now()), Files{Disk: disk}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("restore", func(b *testing.B) {
		b.SetBytes(100 << 20)
		for i := 0; i < b.N; i++ {
			out := filepath.Join(dir, "restored.img")
			os.Remove(out)
			if _, err := st.Restore(b.Context(), "sbx_bench", "", Files{Disk: out}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tar_zstd", func(b *testing.B) {
		b.SetBytes(100 << 20)
		for i := 0; i < b.N; i++ {
			if out, err := exec.Command("sh", "-c", "cd "+dir+" && tar -c raw | zstd -q -T0 -1 -f -o raw.tar.zst && sync raw.tar.zst").CombinedOutput(); err != nil {
				b.Fatal(err, string(out))
			}
		}
	})
	b.Run("untar_zstd", func(b *testing.B) {
		b.SetBytes(100 << 20)
		for i := 0; i < b.N; i++ {
			if out, err := exec.Command("sh", "-c", "mkdir -p "+dir+"/x && cd "+dir+"/x && zstd -q -d -c ../raw.tar.zst | tar -x").CombinedOutput(); err != nil {
				b.Fatal(err, string(out))
			}
		}
	})
}
