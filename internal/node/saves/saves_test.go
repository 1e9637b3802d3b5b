package saves

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/testsupport/s3server"
)

// newS3 is an S3 store over a fresh versitygw, with 5 MiB parts (the
// least S3 takes) so that tests upload in several parts.
func newS3(t *testing.T) (*S3, *s3server.Server) {
	t.Helper()
	srv := s3server.Start(t)
	srv.Env(t)
	st, err := Open(t.Context(), srv.PrefixURL("cove/"+t.Name()), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := st.(*S3)
	s.partSize = 5 << 20
	return s, srv
}

// stores are both stores, for the tests that hold for each.
func stores(t *testing.T) map[string]Store {
	d, err := NewDir(filepath.Join(t.TempDir(), "saves"))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newS3(t)
	return map[string]Store{"dir": d, "s3": s}
}

// sparseDisk writes a 64 MiB sparse image with data of seed in the middle
// and at the end; dataMiB sets how much.
func sparseDisk(t *testing.T, path string, dataMiB int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Truncate(64 << 20)
	data := make([]byte, dataMiB<<20)
	rand.Read(data)
	f.WriteAt(data, 5<<20)
	f.WriteAt([]byte("tail"), 64<<20-4)
}

func outputDir(t *testing.T, dir string) {
	t.Helper()
	for name, content := range map[string]string{
		"cmd_1/stdout": "hello\n", "cmd_1/index": "\x00\x01\x02", "cmd_2/stderr": strings.Repeat("e", 70000),
	} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o700)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(dir, "cmd_3"), 0o700) // a command with no output yet
	os.WriteFile(filepath.Join(dir, OutputMarker), []byte("old"), 0o600)
}

func fileSum(t *testing.T, path string) string {
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

// treeSums maps each file and directory under dir to its sha-256 ("dir"
// for directories).
func treeSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case rel == "." || rel == OutputMarker:
		case d.IsDir():
			sums[rel] = "dir"
		default:
			sums[rel] = fileSum(t, path)
		}
		return nil
	})
	return sums
}

// TestRoundTrip: a sparse disk and an output directory come back
// byte-identical, the disk sparse, with the generation's marker.
func TestRoundTrip(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			img, out := filepath.Join(dir, "disk.img"), filepath.Join(dir, "out")
			sparseDisk(t, img, 12)
			outputDir(t, out)
			m, err := st.Save(t.Context(), "sbx_a", "0-100", Files{Disk: img, Output: out})
			if err != nil {
				t.Fatal(err)
			}
			if m.DiskBytes != 64<<20 || m.DataBytes >= 20<<20 || m.DataBytes < 12<<20 || !m.HasOutput() || m.Generation != "0-100" {
				t.Errorf("manifest %+v: want the apparent size, only the data extents, the output and the generation", m)
			}
			got, gotOut := filepath.Join(dir, "restored.img"), filepath.Join(dir, "restored-out")
			rm, err := st.Restore(t.Context(), "sbx_a", "", Files{Disk: got, Output: gotOut})
			if err != nil {
				t.Fatal(err)
			}
			if rm.Generation != "0-100" {
				t.Errorf("restored generation %q", rm.Generation)
			}
			if fileSum(t, img) != fileSum(t, got) {
				t.Fatal("restored disk differs")
			}
			if fi, _ := os.Stat(got); fi == nil || fi.Sys() == nil {
				t.Fatal("no restored disk")
			}
			if want, have := treeSums(t, out), treeSums(t, gotOut); fmt.Sprint(want) != fmt.Sprint(have) {
				t.Errorf("restored output %v, want %v", have, want)
			}
			if b, _ := os.ReadFile(filepath.Join(gotOut, OutputMarker)); string(b) != "0-100" {
				t.Errorf("marker %q, want the restored generation", b)
			}
			// Without an output target only the disk comes back.
			disk2 := filepath.Join(dir, "again.img")
			if _, err := st.Restore(t.Context(), "sbx_a", "0-100", Files{Disk: disk2}); err != nil {
				t.Fatal(err)
			}
			// A restore over an existing output directory fails and
			// leaves no disk.
			disk3 := filepath.Join(dir, "third.img")
			if _, err := st.Restore(t.Context(), "sbx_a", "", Files{Disk: disk3, Output: gotOut}); err == nil {
				t.Error("a restore replaced an existing output directory")
			}
			if _, err := os.Stat(disk3); !os.IsNotExist(err) {
				t.Error("a failed restore left its disk")
			}
			if err := st.Delete(t.Context(), "sbx_a"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Stat(t.Context(), "sbx_a", ""); api.ErrorCode(err) != api.CodeNotFound {
				t.Errorf("stat after delete: %v", err)
			}
		})
	}
}

// TestDirCorrupt: a corrupted archive is refused and leaves no file; a
// save without its manifest is not complete.
func TestDirCorrupt(t *testing.T) {
	dir := t.TempDir()
	st, err := NewDir(filepath.Join(dir, "saves"))
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "disk.img")
	sparseDisk(t, img, 3)
	if _, err := st.Save(t.Context(), "sbx_a", "0-1", Files{Disk: img}); err != nil {
		t.Fatal(err)
	}
	arch := filepath.Join(dir, "saves", "sbx_a", archiveName)
	b, _ := os.ReadFile(arch)
	b[len(b)/2] ^= 0xff
	os.WriteFile(arch, b, 0o600)
	out := filepath.Join(dir, "again.img")
	if _, err := st.Restore(t.Context(), "sbx_a", "", Files{Disk: out}); err == nil {
		t.Error("a corrupted save restored")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("a failed restore left its file")
	}
	if _, err := st.Stat(t.Context(), "sbx_a", "0-2"); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("a generation the store does not keep: %v", err)
	}
	os.MkdirAll(filepath.Join(dir, "saves", "sbx_b"), 0o700)
	os.WriteFile(filepath.Join(dir, "saves", "sbx_b", archiveName), []byte("partial"), 0o600)
	if _, err := st.Stat(t.Context(), "sbx_b", ""); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("an incomplete save: %v", err)
	}
}

// TestS3Generations: "" restores the newest complete generation, a
// named one restores exactly that one, and a generation whose manifest
// never arrived (its upload cut) is neither newest nor restorable;
// Prune keeps only the one named; Delete removes every generation.
func TestS3Generations(t *testing.T) {
	st, srv := newS3(t)
	ctx := t.Context()
	dir := t.TempDir()
	old, cur := filepath.Join(dir, "old.img"), filepath.Join(dir, "cur.img")
	sparseDisk(t, old, 1)
	sparseDisk(t, cur, 1)
	if _, err := st.Save(ctx, "sbx_g", "1-100", Files{Disk: old}); err != nil {
		t.Fatal(err)
	}
	// Epochs are per node: a later time wins over a higher epoch.
	if _, err := st.Save(ctx, "sbx_g", "0-200", Files{Disk: cur}); err != nil {
		t.Fatal(err)
	}
	// A newer save cut mid-upload: its archive is there, its manifest not.
	c := srv.Client()
	arch, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &srv.Bucket, Key: aws.String(st.saveKey("sbx_g", "0-200", archiveName))})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(arch.Body)
	arch.Body.Close()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &srv.Bucket, Key: aws.String(st.saveKey("sbx_g", "2-300", archiveName)), Body: bytes.NewReader(body[:len(body)/2])}); err != nil {
		t.Fatal(err)
	}

	m, err := st.Stat(ctx, "sbx_g", "")
	if err != nil || m.Generation != "0-200" {
		t.Fatalf("newest %+v, %v; want 0-200 (the cut 2-300 is incomplete)", m, err)
	}
	for gen, want := range map[string]string{"": cur, "0-200": cur, "1-100": old} {
		out := filepath.Join(dir, "r-"+gen+".img")
		m, err := st.Restore(ctx, "sbx_g", gen, Files{Disk: out})
		if err != nil {
			t.Fatalf("restore %q: %v", gen, err)
		}
		if fileSum(t, out) != fileSum(t, want) {
			t.Errorf("restore %q gave generation %s's disk", gen, m.Generation)
		}
	}
	if _, err := st.Restore(ctx, "sbx_g", "2-300", Files{Disk: filepath.Join(dir, "cut.img")}); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("restore of the cut save: %v", err)
	}
	// A manifest placed under another generation's name (by a node that
	// can write the bucket) names its own generation: refused.
	if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{
		Bucket: &srv.Bucket, CopySource: aws.String(srv.Bucket + "/" + st.saveKey("sbx_g", "1-100", manifest)),
		Key: aws.String(st.saveKey("sbx_g", "0-150", manifest)),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Restore(ctx, "sbx_g", "0-150", Files{Disk: filepath.Join(dir, "moved.img")}); err == nil {
		t.Error("a manifest moved to another generation was restored")
	}
	if _, err := st.Stat(ctx, "sbx_g", "../x"); api.ErrorCode(err) != api.CodeInvalidArgument {
		t.Errorf("a generation that is a path: %v", err)
	}

	// Prune keeps the generation named and nothing else.
	if err := st.Prune(ctx, "sbx_g", "1-100"); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Stat(ctx, "sbx_g", ""); err != nil || m.Generation != "1-100" {
		t.Errorf("after prune the newest is %+v, %v; want 1-100", m, err)
	}
	pruned, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &srv.Bucket, Prefix: aws.String(st.key("saves", "sbx_g") + "/")})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range pruned.Contents {
		if !strings.HasPrefix(aws.ToString(o.Key), st.key("saves", "sbx_g", "1-100")+"/") {
			t.Errorf("prune left %s", aws.ToString(o.Key))
		}
	}
	if len(pruned.Contents) != 2 {
		t.Errorf("prune left %d objects of the kept generation, want its archive and manifest", len(pruned.Contents))
	}

	if err := st.Delete(ctx, "sbx_g"); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &srv.Bucket, Prefix: aws.String(st.key("saves", "sbx_g") + "/")})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Contents) != 0 {
		t.Errorf("after delete %d objects remain, first %s", len(list.Contents), aws.ToString(list.Contents[0].Key))
	}
}

// TestCopy: a copy holds the source's disk under the new name and
// generation, in each store.
func TestCopy(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			img := filepath.Join(dir, "disk.img")
			sparseDisk(t, img, 6)
			out := filepath.Join(dir, "out")
			outputDir(t, out)
			if _, err := st.Save(t.Context(), "sbx_from", "0-1", Files{Disk: img, Output: out}); err != nil {
				t.Fatal(err)
			}
			m, err := Copy(t.Context(), st, "sbx_from", "", "sbx_to", "0-2", dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Generation != "0-2" || m.SandboxID != "sbx_to" || m.HasOutput() {
				t.Errorf("copy's manifest %+v", m)
			}
			got := filepath.Join(dir, "got.img")
			if _, err := st.Restore(t.Context(), "sbx_to", "0-2", Files{Disk: got}); err != nil {
				t.Fatal(err)
			}
			if fileSum(t, got) != fileSum(t, img) {
				t.Error("the copy's disk differs")
			}
			if ents, _ := filepath.Glob(filepath.Join(dir, ".copy-*")); len(ents) != 0 {
				t.Errorf("copy left %v", ents)
			}
		})
	}
}

// TestBlobs: a blob comes back by its digest; bytes of another digest
// are refused and nothing is kept; a blob tampered with in the bucket
// fails when read.
func TestBlobs(t *testing.T) {
	st, srv := newS3(t)
	d, err := NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 11<<20) // three parts
	rand.Read(data)
	digest := fmt.Sprintf("sha256:%x", sha256.Sum256(data))
	other := fmt.Sprintf("sha256:%x", sha256.Sum256([]byte("other")))
	for name, b := range map[string]Blobs{"dir": d, "s3": st} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			if err := b.PutBlob(ctx, digest, bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
			r, err := b.GetBlob(ctx, digest)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("blob read back: %v", err)
			}
			if err := b.PutBlob(ctx, other, bytes.NewReader(data)); api.ErrorCode(err) != api.CodeInvalidArgument {
				t.Errorf("bytes under another digest: %v", err)
			}
			if _, err := b.GetBlob(ctx, other); api.ErrorCode(err) != api.CodeNotFound {
				t.Errorf("a refused blob is kept: %v", err)
			}
			if err := b.PutBlob(ctx, "sha256:../../x", bytes.NewReader(nil)); api.ErrorCode(err) != api.CodeInvalidArgument {
				t.Errorf("a digest that is a path: %v", err)
			}
		})
	}
	// Tampered with in the bucket (a node's credentials can write it).
	ctx := t.Context()
	key := st.key("images", "sha256-"+digest[len("sha256:"):]+".tar")
	if _, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: &srv.Bucket, Key: &key, Body: bytes.NewReader([]byte("evil"))}); err != nil {
		t.Fatal(err)
	}
	r, err := st.GetBlob(ctx, digest)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := io.ReadAll(r); err == nil {
		t.Error("a tampered blob read without error")
	}
}

// TestHostileOutputArchive: an output archive in a save (written by some
// node) cannot place files outside the output directory.
func TestHostileOutputArchive(t *testing.T) {
	for _, entry := range []tar.Header{
		{Name: "../escape", Typeflag: tar.TypeReg, Size: 1},
		{Name: "/abs", Typeflag: tar.TypeReg, Size: 1},
		{Name: "cmd_1/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
	} {
		t.Run(entry.Name, func(t *testing.T) {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			tw := tar.NewWriter(zw)
			tw.WriteHeader(&entry)
			if entry.Size > 0 {
				tw.Write([]byte("x"))
			}
			tw.Close()
			zw.Close()
			sum := sha256.Sum256(buf.Bytes())
			dir := t.TempDir()
			out := filepath.Join(dir, "out", "sbx")
			os.Mkdir(filepath.Join(dir, "out"), 0o700)
			err := restoreOutput(t.Context(), bytes.NewReader(buf.Bytes()), out, Manifest{OutputSHA256: hex.EncodeToString(sum[:])})
			if err == nil {
				t.Fatal("a hostile entry was restored")
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, "out")); len(ents) != 0 {
				t.Errorf("left %v", ents)
			}
			if _, err := os.Stat(filepath.Join(dir, "out", "escape")); err == nil {
				t.Error("a file escaped")
			}
		})
	}
}

// TestOpen: a path is a Dir, an s3:// URL a bucket, anything else (or an
// s3 URL without credentials) a clear error; a credentials file is read.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if st, err := Open(t.Context(), filepath.Join(dir, "saves"), ""); err != nil {
		t.Fatal(err)
	} else if _, ok := st.(*Dir); !ok {
		t.Errorf("a path opened %T", st)
	}
	creds := filepath.Join(dir, "creds")
	os.WriteFile(creds, []byte("[default]\naws_access_key_id = AK\naws_secret_access_key = SK\n"), 0o600)
	st, err := Open(t.Context(), "s3://bucket/some/prefix/?endpoint=http://127.0.0.1:9", creds)
	if err != nil {
		t.Fatal(err)
	}
	s := st.(*S3)
	if s.bucket != "bucket" || s.key("saves", "x") != "some/prefix/saves/x" {
		t.Errorf("bucket %q, key %q", s.bucket, s.key("saves", "x"))
	}
	st.Close()
	for _, bad := range []string{
		"http://bucket/prefix", "s3:///prefix", "s3://bucket/p?endpoint=ftp://x", "s3://bucket/p?region=x",
		"s3://bucket/p", // no credentials in the environment
	} {
		if _, err := Open(t.Context(), bad, ""); err == nil {
			t.Errorf("%s opened", bad)
		}
	}
	if _, err := OpenS3(t.Context(), &url.URL{Scheme: "s3", Host: "b", User: url.UserPassword("a", "b")}, creds); err == nil {
		t.Error("credentials in the URL accepted")
	}
}

// TestIDs: a sandbox ID or generation that is not one plain path segment
// is refused by every store.
func TestIDs(t *testing.T) {
	for name, st := range stores(t) {
		for _, id := range []string{"", "..", "../x", "a/b", ".images"} {
			if _, err := st.Stat(t.Context(), id, ""); api.ErrorCode(err) != api.CodeInvalidArgument {
				t.Errorf("%s: id %q: %v", name, id, err)
			}
			if err := st.Delete(t.Context(), id); api.ErrorCode(err) != api.CodeInvalidArgument {
				t.Errorf("%s: delete %q: %v", name, id, err)
			}
		}
	}
}

func TestNewer(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"0-200", "1-100", true},
		{"0-10", "0-9", true}, // numeric, not lexical
		{"2-5", "1-5", true},
		{"x", "0-1", false},
		{"0-1", "x", true},
	} {
		if got := newer(c.a, c.b); got != c.want {
			t.Errorf("newer(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

// TestS3UploadCut: an upload that fails after some of its parts went up
// leaves neither the object nor an unfinished multipart upload, and a
// save that fails leaves no object of its generation.
func TestS3UploadCut(t *testing.T) {
	st, srv := newS3(t)
	ctx := t.Context()
	c := srv.Client()
	key := st.key("saves", "sbx_cut", "0-1", archiveName)
	err := st.upload(ctx, key, func(w io.Writer) error {
		chunk := make([]byte, 1<<20)
		for range 11 { // two parts go up, the third is cut
			rand.Read(chunk)
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
		return fmt.Errorf("the disk went away")
	}, nil)
	if err == nil {
		t.Fatal("a cut upload succeeded")
	}
	if _, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &srv.Bucket, Key: &key}); err == nil {
		t.Error("a cut upload left its object")
	}
	ups, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &srv.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Errorf("%d unfinished uploads remain", len(ups.Uploads))
	}

	// A save whose output cannot be read fails after its disk went up.
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	sparseDisk(t, img, 1)
	if _, err := st.Save(ctx, "sbx_cut", "0-2", Files{Disk: img, Output: filepath.Join(img, "not-a-dir")}); err == nil {
		t.Fatal("a save of unreadable output succeeded")
	}
	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &srv.Bucket, Prefix: aws.String(st.key("saves", "sbx_cut") + "/")})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Contents) != 0 {
		t.Errorf("a failed save left %s", aws.ToString(list.Contents[0].Key))
	}
}

// TestGzipSaveRestores: a save written before zstd (gzip archives, its
// manifest's format cove-sparse-gzip-1) restores byte-identical, and a
// save written now is zstd, its manifest saying so.
func TestGzipSaveRestores(t *testing.T) {
	dir := t.TempDir()
	st, err := NewDir(filepath.Join(dir, "saves"))
	if err != nil {
		t.Fatal(err)
	}
	img, out := filepath.Join(dir, "disk.img"), filepath.Join(dir, "out")
	sparseDisk(t, img, 3)
	outputDir(t, out)

	// The old writer: gzip at BestSpeed around the same content.
	gzipped := func(write func(w io.Writer) error) []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		if err := write(zw); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	src, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var data int64
	disk := gzipped(func(w io.Writer) (err error) { data, err = writeExtents(t.Context(), w, src, 64<<20); return err })
	output := gzipped(func(w io.Writer) error {
		tw := tar.NewWriter(w)
		for _, name := range []string{"cmd_1/stdout", "cmd_1/index", "cmd_2/stderr"} {
			if err := addFile(tw, filepath.Join(out, name), name); err != nil {
				return err
			}
		}
		return tw.Close()
	})
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	old := filepath.Join(dir, "saves", "sbx_old")
	os.MkdirAll(old, 0o700)
	m := Manifest{SandboxID: "sbx_old", Generation: "0-1", Format: "cove-sparse-gzip-1", DiskBytes: 64 << 20, DataBytes: data,
		ArchiveBytes: int64(len(disk)), SHA256: sum(disk), OutputBytes: int64(len(output)), OutputSHA256: sum(output)}
	mb, _ := json.Marshal(m)
	for name, b := range map[string][]byte{archiveName: disk, outputName: output, manifest: mb} {
		if err := os.WriteFile(filepath.Join(old, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, gotOut := filepath.Join(dir, "restored.img"), filepath.Join(dir, "restored-out")
	if _, err := st.Restore(t.Context(), "sbx_old", "", Files{Disk: got, Output: gotOut}); err != nil {
		t.Fatalf("restore of a gzip save: %v", err)
	}
	if fileSum(t, img) != fileSum(t, got) {
		t.Error("the gzip save's disk came back different")
	}
	for _, name := range []string{"cmd_1/stdout", "cmd_1/index", "cmd_2/stderr"} {
		if fileSum(t, filepath.Join(out, name)) != fileSum(t, filepath.Join(gotOut, name)) {
			t.Errorf("the gzip save's %s came back different", name)
		}
	}

	nm, err := st.Save(t.Context(), "sbx_new", "0-1", Files{Disk: img, Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if nm.Format != "cove-sparse-zstd-1" {
		t.Errorf("a new save's format is %q", nm.Format)
	}
	for _, name := range []string{archiveName, outputName} {
		b, _ := os.ReadFile(filepath.Join(dir, "saves", "sbx_new", name))
		if !bytes.HasPrefix(b, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			t.Errorf("a new save's %s is not zstd: % x", name, b[:min(len(b), 4)])
		}
	}
	// Neither zstd nor gzip: refused, nothing left.
	os.WriteFile(filepath.Join(old, archiveName), []byte("plain bytes"), 0o600)
	m.SHA256, m.ArchiveBytes = sum([]byte("plain bytes")), 11
	mb, _ = json.Marshal(m)
	os.WriteFile(filepath.Join(old, manifest), mb, 0o600)
	third := filepath.Join(dir, "third.img")
	if _, err := st.Restore(t.Context(), "sbx_old", "", Files{Disk: third}); err == nil || !strings.Contains(err.Error(), "neither zstd nor gzip") {
		t.Errorf("an archive of unknown compression: %v", err)
	}
	if _, err := os.Stat(third); !os.IsNotExist(err) {
		t.Error("a failed restore left its disk")
	}
}
