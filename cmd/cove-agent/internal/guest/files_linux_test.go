package guest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/agent/client"
	"github.com/cove-dev/cove/internal/agent/wire"
)

func TestFindOnce(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 3*copyBuffer)
	across := append(bytes.Repeat([]byte("a"), copyBuffer-2), []byte("NEEDLEb")...)
	tests := []struct {
		name      string
		data      []byte
		old       string
		wantOff   int64
		wantCount int
	}{
		{"once", []byte("hello world"), "world", 6, 1},
		{"none", []byte("hello world"), "moon", -1, 0},
		{"twice", []byte("ab ab"), "ab", 0, 2},
		{"overlapping", []byte("aaa"), "aa", 0, 2},
		{"across a window", across, "NEEDLE", copyBuffer - 2, 1},
		{"at the very end", append(append([]byte{}, big...), "END"...), "END", 3 * copyBuffer, 1},
		{"longer than the file", []byte("ab"), "abc", -1, 0},
		{"many in a big file", big, "xx", 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			off, n, err := findOnce(bytes.NewReader(tt.data), int64(len(tt.data)), []byte(tt.old))
			if err != nil || off != tt.wantOff || n != tt.wantCount {
				t.Errorf("findOnce = %d, %d, %v; want %d, %d", off, n, err, tt.wantOff, tt.wantCount)
			}
		})
	}
}

func TestCheckLinkAndNames(t *testing.T) {
	x := &extractor{p: "/w/d", target: "/w/d"}
	for _, tt := range []struct {
		rel, link string
		ok        bool
	}{
		{"a", "b", true},
		{"sub/a", "../b", true},
		{"sub/a", "../../b", false},
		{"a", "../x", false},
		{"a", "/etc/passwd", false},
		{"a", "b/../../x", false},
		{"a", "./b/./c", true},
	} {
		if err := x.checkLink(tt.rel, tt.rel, tt.link); (err == nil) != tt.ok {
			t.Errorf("checkLink(%q -> %q) = %v, want ok %v", tt.rel, tt.link, err, tt.ok)
		}
	}
	for _, name := range []string{"../x", "/etc/x", "a/../../x", "a\x00b"} {
		if _, err := x.entryName(name); err == nil {
			t.Errorf("entryName(%q) accepted", name)
		}
	}
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// agentCode is the code of the error the client returned for an answer of
// the agent (the client gives cove's codes, spelled as the protocol's).
func agentCode(err error) string {
	var e *api.Error
	if errors.As(err, &e) {
		return string(e.Code)
	}
	return "none: " + fmt.Sprint(err)
}

func TestFileWriteRead(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	ctx := t.Context()
	dir := t.TempDir()
	p := filepath.Join(dir, "new/sub/f.txt")
	write := func(req client.WriteRequest, body string) (wire.FileInfo, error) {
		req.Path, req.UID, req.GID, req.Size = p, 1000, 1000, int64(len(body))
		if req.Mode == 0 {
			req.Mode = -1
		}
		fi, _, err := c.WriteFile(ctx, req, strings.NewReader(body))
		return fi, err
	}
	fi, err := write(client.WriteRequest{}, "one")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != 3 || fi.Mode != 0o644 || fi.UID != 1000 || fi.Type != wire.FileTypeFile {
		t.Errorf("new file: %+v", fi)
	}
	if st, _ := os.Stat(filepath.Dir(p)); st == nil || statOf(st).Uid != 1000 {
		t.Errorf("parent not created owned by 1000")
	}
	read := func() (string, http.Header) {
		fc, err := c.ReadFile(ctx, p, http.Header{})
		if err != nil {
			t.Fatal(err)
		}
		defer fc.Body.Close()
		b, _ := io.ReadAll(fc.Body)
		return string(b), fc.Header
	}
	got, h := read()
	sum := sha256.Sum256([]byte("one"))
	if got != "one" || h.Get("ETag") != `"`+fi.Version+`"` || h.Get("Repr-Digest") != "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":" {
		t.Errorf("read: %q %v", got, h)
	}

	// A stale If-Match and a wrong digest are refused; the content stays.
	if _, err := write(client.WriteRequest{IfMatch: []string{"stale"}}, "two"); agentCode(err) != wire.CodePreconditionFailed {
		t.Errorf("stale If-Match: %v", err)
	}
	if _, err := write(client.WriteRequest{SHA256: sha([]byte("other"))}, "two"); agentCode(err) != wire.CodeUnprocessable {
		t.Errorf("wrong digest: %v", err)
	}
	if _, err := write(client.WriteRequest{TrailerSHA256: func() (string, error) { return sha([]byte("other")), nil }}, "two"); agentCode(err) != wire.CodeUnprocessable {
		t.Errorf("wrong trailer digest: %v", err)
	}
	if _, err := write(client.WriteRequest{IfNoneMatch: true}, "two"); agentCode(err) != wire.CodePreconditionFailed {
		t.Errorf("If-None-Match on an existing file: %v", err)
	}
	if got, _ := read(); got != "one" {
		t.Errorf("after refused writes: %q", got)
	}
	// Mode and owner are kept when not asked.
	os.Chmod(p, 0o600)
	os.Chown(p, 1234, 1234)
	fi2, err := write(client.WriteRequest{IfMatch: []string{versionAt(t, p)}, TrailerSHA256: func() (string, error) { return sha([]byte("two")), nil }}, "two")
	if err != nil {
		t.Fatal(err)
	}
	if fi2.Mode != 0o600 || fi2.UID != 1234 || fi2.Version == fi.Version {
		t.Errorf("rewrite: %+v", fi2)
	}
	if got, _ := read(); got != "two" {
		t.Errorf("after write: %q", got)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".cove-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}

	// Two writers with the same If-Match: exactly one wins.
	v := versionAt(t, p)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			_, errs[i] = write(client.WriteRequest{IfMatch: []string{v}}, fmt.Sprintf("writer %d", i))
		})
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("both or neither won: %v, %v", errs[0], errs[1])
	}
	winner := 0
	if errs[0] != nil {
		winner = 1
	}
	if agentCode(errs[1-winner]) != wire.CodePreconditionFailed {
		t.Errorf("loser: %v", errs[1-winner])
	}
	if got, _ := read(); got != fmt.Sprintf("writer %d", winner) {
		t.Errorf("content %q, winner %d", got, winner)
	}

	// Range.
	fc, err := c.ReadFile(ctx, p, http.Header{"Range": {"bytes=1-3"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(fc.Body)
	fc.Body.Close()
	if fc.Status != http.StatusPartialContent || string(b) != "rit" {
		t.Errorf("range: %d %q", fc.Status, b)
	}

	// Errors.
	if _, err := c.ReadFile(ctx, filepath.Join(dir, "nope"), http.Header{}); agentCode(err) != wire.CodeNotFound {
		t.Errorf("missing: %v", err)
	}
	if _, err := c.ReadFile(ctx, dir, http.Header{}); agentCode(err) != wire.CodeConflict {
		t.Errorf("directory: %v", err)
	}
	for _, bad := range []string{"/proc/self/x", "/.cove/cove-agent", "/sys/kernel/x"} {
		req := client.WriteRequest{Path: bad, Mode: -1}
		if _, _, err := c.WriteFile(ctx, req, strings.NewReader("x")); agentCode(err) != wire.CodePermissionDenied {
			t.Errorf("write %s: %v", bad, err)
		}
	}
	if _, err := c.StatFile(ctx, "relative"); agentCode(err) != wire.CodeInvalidArgument {
		t.Errorf("relative: %v", err)
	}
}

func versionAt(t *testing.T, p string) string {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return versionOf(statOf(fi))
}

func TestFileEditMoveRemoveList(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	ctx := t.Context()
	dir := t.TempDir()
	p := filepath.Join(dir, "f.go")
	os.WriteFile(p, []byte("a := 1\nb := 2\nb := 2\n"), 0o640)
	for _, tt := range []struct {
		edits []wire.FileEdit
		code  string
	}{
		{[]wire.FileEdit{{Old: "zzz", New: "y"}}, wire.CodeConflict},
		{[]wire.FileEdit{{Old: "b := 2", New: "b := 3"}}, wire.CodeConflict},
		{[]wire.FileEdit{{Old: "a := 1", New: "a := 9"}, {Old: "nope", New: "x"}}, wire.CodeConflict},
	} {
		if _, err := c.EditFile(ctx, wire.EditRequest{Path: p, Edits: tt.edits}); agentCode(err) != tt.code {
			t.Errorf("edit %v: %v", tt.edits, err)
		}
	}
	if _, err := c.EditFile(ctx, wire.EditRequest{Path: p, IfMatch: []string{"old"}, Edits: []wire.FileEdit{{Old: "a := 1", New: "a := 9"}}}); agentCode(err) != wire.CodePreconditionFailed {
		t.Errorf("stale edit: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "a := 1\nb := 2\nb := 2\n" {
		t.Errorf("refused edits changed the file: %q", b)
	}
	fi, err := c.EditFile(ctx, wire.EditRequest{Path: p, IfMatch: []string{versionAt(t, p)}, Edits: []wire.FileEdit{
		{Old: "a := 1", New: "a := 9"}, {Old: "b := 2\nb", New: "c := 2\nb"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "a := 9\nc := 2\nb := 2\n" || fi.Mode != 0o640 {
		t.Errorf("edited: %q %+v", b, fi)
	}

	if _, err := c.Mkdir(ctx, wire.MkdirRequest{Path: filepath.Join(dir, "x/y"), UID: 1000, GID: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.MoveFile(ctx, wire.MoveRequest{From: p, To: filepath.Join(dir, "x/y/g.go")}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, []byte("again"), 0o644)
	if _, err := c.MoveFile(ctx, wire.MoveRequest{From: p, To: filepath.Join(dir, "x/y/g.go")}); agentCode(err) != wire.CodeConflict {
		t.Errorf("move onto an existing file: %v", err)
	}
	if _, err := c.MoveFile(ctx, wire.MoveRequest{From: p, To: filepath.Join(dir, "x/y/g.go"), Overwrite: true}); err != nil {
		t.Errorf("move with overwrite: %v", err)
	}
	for i := range 5 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("x/n%d", i)), nil, 0o644)
	}
	var all []string
	after := ""
	for {
		l, err := c.ListFiles(ctx, client.ListRequest{Path: dir, Depth: 3, Limit: 1, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, fi := range l.Items {
			all = append(all, strings.TrimPrefix(fi.Path, dir))
		}
		if after = l.Next; after == "" {
			break
		}
	}
	want := "/x /x/n0 /x/n1 /x/n2 /x/n3 /x/n4 /x/y /x/y/g.go"
	if strings.Join(all, " ") != want {
		t.Errorf("list pages: %q, want %q", strings.Join(all, " "), want)
	}
	if err := c.RemoveFile(ctx, filepath.Join(dir, "x"), false); agentCode(err) != wire.CodeConflict {
		t.Errorf("remove a full directory: %v", err)
	}
	if err := c.RemoveFile(ctx, filepath.Join(dir, "x"), true); err != nil {
		t.Errorf("remove recursive: %v", err)
	}
	if err := c.RemoveFile(ctx, filepath.Join(dir, "x"), true); agentCode(err) != wire.CodeNotFound {
		t.Errorf("remove again: %v", err)
	}
}

type tarEntry struct {
	name, link string
	typ        byte
	body       string
}

func makeTar(t *testing.T, entries []tarEntry) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, e.body)
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func TestFileArchive(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	ctx := t.Context()
	dir := t.TempDir()
	good := []tarEntry{
		{name: "src/", typ: tar.TypeDir},
		{name: "src/main.go", typ: tar.TypeReg, body: "package main\n"},
		{name: "src/link", typ: tar.TypeSymlink, link: "main.go"},
		{name: "src/hard", typ: tar.TypeLink, link: "src/main.go"},
	}
	for _, bad := range [][]tarEntry{
		{{name: "ok.txt", typ: tar.TypeReg, body: "ok"}, {name: "../x", typ: tar.TypeReg, body: "x"}},
		{{name: "ok.txt", typ: tar.TypeReg, body: "ok"}, {name: "/abs", typ: tar.TypeReg, body: "x"}},
		{{name: "ok.txt", typ: tar.TypeReg, body: "ok"}, {name: "esc", typ: tar.TypeSymlink, link: "../../etc"}},
		{{name: "ok.txt", typ: tar.TypeReg, body: "ok"}, {name: "l", typ: tar.TypeSymlink, link: "."}, {name: "l/x", typ: tar.TypeReg, body: "x"}},
		{{name: "ok.txt", typ: tar.TypeReg, body: "ok"}, {name: "h", typ: tar.TypeLink, link: "../outside"}},
	} {
		_, err := c.WriteArchive(ctx, filepath.Join(dir, "d"), 1000, 1000, bytes.NewReader(makeTar(t, bad)))
		if agentCode(err) != wire.CodeInvalidArgument {
			t.Errorf("archive %v: %v", bad, err)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("a refused archive left %v", left)
		}
	}
	res, err := c.WriteArchive(ctx, filepath.Join(dir, "d"), 1000, 1000, bytes.NewReader(makeTar(t, good)))
	if err != nil || res.Entries != 4 {
		t.Fatalf("extract: %+v %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "d/src/link")); string(b) != "package main\n" {
		t.Errorf("link: %q", b)
	}
	// Again, into the existing folder: merged.
	more := []tarEntry{{name: "src/more.go", typ: tar.TypeReg, body: "more"}}
	if _, err := c.WriteArchive(ctx, filepath.Join(dir, "d"), 1000, 1000, bytes.NewReader(makeTar(t, more))); err != nil {
		t.Fatal(err)
	}
	rc, err := c.ReadArchive(ctx, filepath.Join(dir, "d"))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	zr, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if got := strings.Join(names, " "); got != "src/ src/hard src/link src/main.go src/more.go" {
		t.Errorf("archive has %q", got)
	}
}
