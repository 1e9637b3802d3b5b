package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	cove "github.com/cove-dev/cove/sdk/go"
)

// entry is one tar entry of a test archive.
type entry struct {
	name, link, body string
	typ              byte
	mode             int64
	size             int64 // the header's size; len(body) when 0
}

// tarGz builds a tar.gz of the entries as they are, however hostile.
func tarGz(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: e.size}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("write header %q: %v", e.name, err)
		}
		if e.body != "" {
			if _, err := io.WriteString(tw, e.body); err != nil && e.size == 0 {
				t.Fatal(err)
			}
		}
	}
	tw.Flush() // no Close: an entry may have been left short on purpose
	if err := tw.Close(); err != nil && !strings.Contains(err.Error(), "missed writing") {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

// hugePAX is a tar.gz whose first entry is a PAX extended header of
// 2 MiB (archive/tar writes none that large, so its header is patched).
func hugePAX(t *testing.T) []byte {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	body := strings.Repeat("x", 2<<20)
	if err := tw.WriteHeader(&tar.Header{Name: "PaxHeaders/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), Format: tar.FormatUSTAR}); err != nil {
		t.Fatal(err)
	}
	io.WriteString(tw, body)
	tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644})
	tw.Close()
	b := raw.Bytes()
	b[156] = tar.TypeXHeader
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b[:512] {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

// tree lists what is under dir: files as "body mode", dirs as "dir",
// links as "-> target"; devices, FIFOs and the like as their type.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			got[rel] = "-> " + target
		case fi.IsDir():
			got[rel] = "dir"
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			got[rel] = string(b) + " " + fi.Mode().Perm().String()
		default:
			got[rel] = fi.Mode().Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestExtract: what an archive may hold lands inside the folder, and
// whatever would leave it, or is not a valid tar.gz, is refused; devices,
// FIFOs and hard links are never made.
func TestExtract(t *testing.T) {
	for _, tt := range []struct {
		name    string
		archive func(t *testing.T) []byte
		want    map[string]string // the folder afterwards (nil: not checked)
		wantErr string            // "" for none
	}{
		{"files, dirs and links", func(t *testing.T) []byte {
			return tarGz(t,
				entry{name: "./", typ: tar.TypeDir, mode: 0o755},
				entry{name: "a/", typ: tar.TypeDir, mode: 0o750},
				entry{name: "a/run.sh", body: "#!/bin/sh\n", mode: 0o755},
				entry{name: "deep/er/f", body: "x"},
				entry{name: "a/up", typ: tar.TypeSymlink, link: "../deep/er/f"},
				entry{name: "a/self", typ: tar.TypeSymlink, link: "."})
		}, map[string]string{
			"a": "dir", "a/run.sh": "#!/bin/sh\n -rwxr-xr-x", "a/up": "-> ../deep/er/f", "a/self": "-> .",
			"deep": "dir", "deep/er": "dir", "deep/er/f": "x -rw-r--r--",
		}, ""},
		{"devices, FIFOs and hard links are skipped", func(t *testing.T) []byte {
			return tarGz(t,
				entry{name: "dev/mem", typ: tar.TypeChar, mode: 0o666},
				entry{name: "dev/sda", typ: tar.TypeBlock, mode: 0o666},
				entry{name: "fifo", typ: tar.TypeFifo},
				entry{name: "hl", typ: tar.TypeLink, link: "../../etc/passwd"},
				entry{name: "ok", body: "ok"})
		}, map[string]string{"ok": "ok -rw-r--r--"}, ""},
		{"absolute name", func(t *testing.T) []byte {
			return tarGz(t, entry{name: "/tmp/evil", body: "x"})
		}, map[string]string{}, "would leave"},
		{"dot-dot", func(t *testing.T) []byte {
			return tarGz(t, entry{name: "../evil", body: "x"})
		}, map[string]string{}, "would leave"},
		{"dot-dot inside a path", func(t *testing.T) []byte {
			return tarGz(t, entry{name: "a/../../evil", body: "x"})
		}, map[string]string{}, "would leave"},
		{"dot-dot dir", func(t *testing.T) []byte {
			return tarGz(t, entry{name: "../", typ: tar.TypeDir, mode: 0o755})
		}, map[string]string{}, "would leave"},
		{"symlink to an absolute path", func(t *testing.T) []byte {
			return tarGz(t, entry{name: "l", typ: tar.TypeSymlink, link: "/etc"})
		}, map[string]string{}, "symlink leaving"},
		{"symlink out by dot-dot", func(t *testing.T) []byte {
			return tarGz(t, entry{name: "a/l", typ: tar.TypeSymlink, link: "../../x"})
		}, map[string]string{}, "symlink leaving"},
		{"symlink out, then a file through it", func(t *testing.T) []byte {
			return tarGz(t,
				entry{name: "l", typ: tar.TypeSymlink, link: "../"},
				entry{name: "l/evil", body: "x"})
		}, map[string]string{}, "symlink leaving"},
		{"huge PAX header", func(t *testing.T) []byte {
			return hugePAX(t)
		}, map[string]string{}, "cut short or invalid"},
		{"file shorter than its header says", func(t *testing.T) []byte {
			b := tarGz(t, entry{name: "f", body: "short", size: 1 << 40})
			return b
		}, nil, "unexpected EOF"},
		{"not gzip", func(t *testing.T) []byte {
			return []byte("plain text, no archive")
		}, map[string]string{}, "archive:"},
		{"gzip cut short", func(t *testing.T) []byte {
			b := tarGz(t, entry{name: "f", body: strings.Repeat("x", 1000)})
			return b[:len(b)-6]
		}, nil, "cut short or invalid"},
		{"gzip checksum wrong after a good tar", func(t *testing.T) []byte {
			b := tarGz(t, entry{name: "f", body: "x"})
			b[len(b)-8] ^= 0xff // the CRC-32
			return b
		}, nil, "cut short or invalid"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "dir")
			err := Extract(bytes.NewReader(tt.archive(t)), dir)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Extract: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Extract = %v; want an error with %q", err, tt.wantErr)
			}
			if tt.want != nil {
				if _, err := os.Stat(dir); err == nil {
					if diff := cmp.Diff(tt.want, tree(t, dir)); diff != "" {
						t.Errorf("folder (-want +got):\n%s", diff)
					}
				}
			}
			// Nothing beside the folder, whatever the archive was.
			if got := names(t, parent); len(got) > 1 || (len(got) == 1 && !got["dir"]) {
				t.Errorf("beside the folder: %v", got)
			}
		})
	}
}

func names(t *testing.T, dir string) map[string]bool {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, e := range es {
		m[e.Name()] = true
	}
	return m
}

// TestExtractThroughExistingLink: merged into a folder that already holds
// a link out of it, an archive cannot write through that link.
func TestExtractThroughExistingLink(t *testing.T) {
	outside := t.TempDir()
	dir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	err := Extract(bytes.NewReader(tarGz(t, entry{name: "out/evil", body: "x"})), dir)
	if err == nil {
		t.Fatal("a file was written through a link out of the folder")
	}
	if got := names(t, outside); len(got) != 0 {
		t.Fatalf("outside the folder: %v", got)
	}
}

// TestExtractInto: a new folder appears only whole (a broken archive
// leaves no trace of it); an existing one is merged into.
func TestExtractInto(t *testing.T) {
	good := tarGz(t, entry{name: "a/f", body: "new"})
	bad := tarGz(t, entry{name: "a/f", body: "x"}, entry{name: "../evil", body: "x"})

	parent := t.TempDir()
	dir := filepath.Join(parent, "sub", "dir")
	if err := ExtractInto(bytes.NewReader(bad), dir); err == nil || !strings.Contains(err.Error(), "nothing was kept") {
		t.Fatalf("ExtractInto(bad) = %v; want nothing kept", err)
	}
	if got := names(t, filepath.Join(parent, "sub")); len(got) != 0 {
		t.Fatalf("a broken archive left %v", got)
	}
	if err := ExtractInto(bytes.NewReader(good), dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("new folder: %v, %v; want mode 0755", fi, err)
	}
	os.WriteFile(filepath.Join(dir, "kept"), []byte("old"), 0o644)
	if err := ExtractInto(bytes.NewReader(tarGz(t, entry{name: "a/g", body: "g"})), dir); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "dir", "a/f": "new -rw-r--r--", "a/g": "g -rw-r--r--", "kept": "old -rw-r--r--"}
	if diff := cmp.Diff(want, tree(t, dir)); diff != "" {
		t.Errorf("merged folder (-want +got):\n%s", diff)
	}
}

func TestExcluder(t *testing.T) {
	ex, err := NewExcluder([]string{"*.pyc", "node_modules", "/dist", "build/out", "cache/", "**/tmp", "# comment", "", "*.env", "!keep.env"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		rel  string
		dir  bool
		want bool
	}{
		{"a.pyc", false, true},
		{"src/x/a.pyc", false, true},
		{"a.py", false, false},
		{"node_modules", true, true},
		{"web/node_modules", true, true},
		{"dist", true, true},
		{"web/dist", true, false},
		{"build/out", false, true},
		{"x/build/out", false, false},
		{"cache", true, true},
		{"cache", false, false},
		{"a/b/tmp", true, true},
		{"x/a.env", false, true},
		{"x/keep.env", false, false},
	} {
		if got := ex.Excluded(tt.rel, tt.dir); got != tt.want {
			t.Errorf("Excluded(%q, dir=%v) = %v; want %v", tt.rel, tt.dir, got, tt.want)
		}
	}
	for _, bad := range []string{"[", "a/[b"} {
		if _, err := NewExcluder([]string{bad}); err == nil {
			t.Errorf("pattern %q accepted", bad)
		}
	}
	if (*Excluder)(nil).Excluded("x", false) {
		t.Error("a nil Excluder excluded something")
	}
}

// folder makes a folder with a bit of everything WriteDir meets.
func folder(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, err := range []error{
		os.MkdirAll(filepath.Join(dir, "a/b"), 0o755),
		os.MkdirAll(filepath.Join(dir, "empty"), 0o700),
		os.MkdirAll(filepath.Join(dir, "node_modules/x"), 0o755),
		os.WriteFile(filepath.Join(dir, "a/b/run.sh"), []byte("#!/bin/sh\n"), 0o755),
		os.WriteFile(filepath.Join(dir, "a/x.pyc"), []byte("x"), 0o644),
		os.WriteFile(filepath.Join(dir, "node_modules/x/i.js"), []byte("x"), 0o644),
		os.Symlink("b/run.sh", filepath.Join(dir, "a/link")),
		os.WriteFile(filepath.Join(dir, IgnoreFile), []byte("node_modules/\n"), 0o644),
		syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestWriteDir: a folder packed and unpacked again is the same folder,
// less what is excluded and what is neither file, dir nor link.
func TestWriteDir(t *testing.T) {
	dir := folder(t)
	ex, err := NewExcluder([]string{"*.pyc"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.AddFile(filepath.Join(dir, IgnoreFile)); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteDir(&buf, dir, ex); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s carries its owner: %d:%d %q:%q", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
	}
	out := t.TempDir()
	if err := Extract(&buf, out); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		IgnoreFile: "node_modules/\n -rw-r--r--",
		"a":        "dir", "a/b": "dir", "a/b/run.sh": "#!/bin/sh\n -rwxr-xr-x", "a/link": "-> b/run.sh",
		"empty": "dir",
	}
	if diff := cmp.Diff(want, tree(t, out)); diff != "" {
		t.Errorf("unpacked (-want +got):\n%s", diff)
	}
}

// TestSDKCopyAlike: the Go SDK's copy of the packer and the Excluder
// (kept for its users, a module of its own) packs a folder to the same
// bytes and excludes the same paths as this package.
func TestSDKCopyAlike(t *testing.T) {
	if IgnoreFile != cove.IgnoreFile {
		t.Errorf("IgnoreFile %q; the SDK's is %q", IgnoreFile, cove.IgnoreFile)
	}
	dir := folder(t)
	patterns := []string{"*.pyc", "node_modules/", "/a/b", "**/tmp", "[ab]"}
	ours, err := NewExcluder(patterns)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := cove.NewExcluder(patterns)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"a.pyc", "x/node_modules", "a/b", "x/a/b", "q/tmp", "a", "c"} {
		for _, isDir := range []bool{false, true} {
			if o, s := ours.Excluded(rel, isDir), theirs.Excluded(rel, isDir); o != s {
				t.Errorf("Excluded(%q, dir=%v): %v here, %v in the SDK", rel, isDir, o, s)
			}
		}
	}
	for _, ex := range []struct {
		ours   *Excluder
		theirs *cove.Excluder
	}{{nil, nil}, {ours, theirs}} {
		var a, b bytes.Buffer
		if err := WriteDir(&a, dir, ex.ours); err != nil {
			t.Fatal(err)
		}
		if err := cove.WriteDirArchive(&b, dir, ex.theirs); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("WriteDir and the SDK's WriteDirArchive differ (%d and %d bytes)", a.Len(), b.Len())
		}
	}
	for _, bad := range []string{"[", "a/[b"} {
		_, e1 := NewExcluder([]string{bad})
		_, e2 := cove.NewExcluder([]string{bad})
		if (e1 == nil) != (e2 == nil) {
			t.Errorf("pattern %q: %v here, %v in the SDK", bad, e1, e2)
		}
	}
}
