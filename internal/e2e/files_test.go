package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// fileCall sends a raw file request and returns status, headers and body.
func fileCall(t testing.TB, s *e2etest.Server, method, ref, what string, q url.Values, hdr http.Header, body io.Reader) (int, http.Header, []byte) {
	t.Helper()
	u := s.URL + "/v1/sandboxes/" + ref + "/files"
	if what != "" {
		u += "/" + what
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.AdminKey)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func errCode(err error) api.Code { return api.ErrorCode(err) }

// readAll downloads a file through the SDK (which checks its digest).
func readAll(t testing.TB, c *cove.Client, ref, path string) (string, *cove.FileReader) {
	t.Helper()
	var b bytes.Buffer
	f, err := c.DownloadFile(t.Context(), ref, path, &b)
	if err != nil {
		t.Fatalf("download %s: %v", path, err)
	}
	return b.String(), f
}

func TestFilesBasics(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	c := s.Admin

	e, err := c.WriteFile(ctx, sb.ID, "/workspace/src/main.py", strings.NewReader("print(42)\n"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != api.FileTypeFile || e.Size != 10 || e.Mode != "0644" || e.UID != 1000 || e.Version == "" || e.Path != "/workspace/src/main.py" {
		t.Errorf("entry of a new file: %+v", e)
	}
	if out := e2etest.MustOK(t, c, sb.ID, "stat -c '%u:%g %a' /workspace/src /workspace/src/main.py; cat /workspace/src/main.py"); out != "1000:1000 755\n1000:1000 644\nprint(42)\n" {
		t.Errorf("in the sandbox: %q", out)
	}
	got, f := readAll(t, c, sb.ID, "/workspace/src/main.py")
	sum := sha256.Sum256([]byte("print(42)\n"))
	if got != "print(42)\n" || f.Version != e.Version || !bytes.Equal(f.Digest, sum[:]) {
		t.Errorf("download: %q %s %x", got, f.Version, f.Digest)
	}
	// As root, with a mode.
	e, err = c.WriteFile(ctx, sb.ID, "/workspace/run.sh", strings.NewReader("#!/bin/sh\necho hi\n"), cove.AsUser("root"), cove.WithMode("0750"))
	if err != nil || e.UID != 0 || e.Mode != "0750" {
		t.Errorf("as root: %+v %v", e, err)
	}
	// A rewrite keeps mode and owner.
	if e, err = c.WriteFile(ctx, sb.ID, "/workspace/run.sh", strings.NewReader("#!/bin/sh\necho again\n")); err != nil || e.UID != 0 || e.Mode != "0750" {
		t.Errorf("rewrite: %+v %v", e, err)
	}
	if out := e2etest.MustOK(t, c, sb.ID, "/workspace/run.sh", e2etest.AsRoot); out != "again\n" {
		t.Errorf("run.sh: %q", out)
	}
	// Range.
	rf, err := c.ReadFile(ctx, sb.ID, "/workspace/src/main.py", cove.ByteRange(6, 7))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rf)
	rf.Close()
	if err != nil || string(b) != "42" || !rf.Partial {
		t.Errorf("range: %q %v", b, err)
	}

	st, err := c.StatFile(ctx, sb.ID, "/workspace/src")
	if err != nil || st.Type != api.FileTypeDir || st.Version == "" {
		t.Errorf("stat dir: %+v %v", st, err)
	}
	if _, err := c.Mkdir(ctx, sb.ID, "/workspace/a/b/c"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.MoveFile(ctx, sb.ID, "/workspace/run.sh", "/workspace/a/b/c/run.sh"); err != nil {
		t.Fatal(err)
	}
	e2etest.MustOK(t, c, sb.ID, "ln -s src/main.py /workspace/link")
	list, err := c.ListFiles(ctx, sb.ID, "/workspace", 1, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list.Items {
		names = append(names, e.Name+":"+string(e.Type))
		if e.Version == "" || e.Mode == "" || e.MTime.IsZero() {
			t.Errorf("entry lacks fields: %+v", e)
		}
		if e.Type == api.FileTypeSymlink && e.Target != "src/main.py" {
			t.Errorf("symlink target: %+v", e)
		}
	}
	if got := strings.Join(names, " "); got != "a:dir link:symlink src:dir" {
		t.Errorf("list: %s", got)
	}
	deep, err := c.ListFiles(ctx, sb.ID, "/workspace", 4, 2, "")
	if err != nil || len(deep.Items) != 2 || deep.NextCursor == "" {
		t.Fatalf("deep list page: %+v %v", deep, err)
	}
	rest, err := c.ListFiles(ctx, sb.ID, "/workspace", 4, 100, deep.NextCursor)
	if err != nil || len(deep.Items)+len(rest.Items) != 7 {
		t.Errorf("deep list: %+v %+v %v", deep.Items, rest.Items, err)
	}
	if err := c.RemoveFile(ctx, sb.ID, "/workspace/a"); errCode(err) != api.CodeConflict {
		t.Errorf("remove a full dir: %v", err)
	}
	if err := c.RemoveFile(ctx, sb.ID, "/workspace/a", cove.Recursive()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StatFile(ctx, sb.ID, "/workspace/a"); errCode(err) != api.CodeNotFound {
		t.Errorf("stat after remove: %v", err)
	}
	// If-None-Match: *.
	if _, err := c.WriteFile(ctx, sb.ID, "/workspace/src/main.py", strings.NewReader("x"), cove.IfNoneMatch()); errCode(err) != api.CodePreconditionFailed {
		t.Errorf("If-None-Match on an existing file: %v", err)
	}
	// ETag on the wire, quoted; 304 for If-None-Match on a download.
	code, hdr, _ := fileCall(t, s, "GET", sb.ID, "content", url.Values{"path": {"/workspace/src/main.py"}}, nil, nil)
	if code != 200 || hdr.Get("ETag") != `"`+f.Version+`"` || !strings.HasPrefix(hdr.Get("Repr-Digest"), "sha-256=:") {
		t.Errorf("download headers: %d %v", code, hdr)
	}
	code, _, _ = fileCall(t, s, "GET", sb.ID, "content", url.Values{"path": {"/workspace/src/main.py"}}, http.Header{"If-None-Match": {hdr.Get("ETag")}}, nil)
	if code != http.StatusNotModified {
		t.Errorf("If-None-Match download: %d", code)
	}
}

// TestFilesLostUpdate: two clients read version v and both write with
// If-Match v; exactly one succeeds, the other gets 412, and the content is
// the winner's.
func TestFilesLostUpdate(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	if _, err := s.Admin.WriteFile(ctx, sb.ID, "/workspace/notes.txt", strings.NewReader("v0\n")); err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		clients := []*cove.Client{cove.New(s.URL, s.AdminKey), cove.New(s.URL, s.AdminKey)}
		var versions [2]string
		for i, c := range clients {
			_, f := readAll(t, c, sb.ID, "/workspace/notes.txt")
			versions[i] = f.Version
		}
		if versions[0] != versions[1] {
			t.Fatalf("two reads of the same file: %v", versions)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, c := range clients {
			wg.Go(func() {
				body := strings.NewReader(fmt.Sprintf("round %d by client %d\n", round, i) + strings.Repeat("x", 1<<20))
				_, errs[i] = c.WriteFile(ctx, sb.ID, "/workspace/notes.txt", body, cove.IfMatch(versions[i]))
			})
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: both or neither succeeded: %v / %v", round, errs[0], errs[1])
		}
		winner := 0
		if errs[0] != nil {
			winner = 1
		}
		if errCode(errs[1-winner]) != api.CodePreconditionFailed {
			t.Errorf("round %d: the loser got %v, want precondition_failed", round, errs[1-winner])
		}
		got, _ := readAll(t, s.Admin, sb.ID, "/workspace/notes.txt")
		if want := fmt.Sprintf("round %d by client %d\n", round, winner); !strings.HasPrefix(got, want) {
			t.Errorf("round %d: content starts %q, want the winner's %q", round, got[:min(len(got), 40)], want)
		}
	}
	// On the wire: 412 with the API's error body.
	code, _, body := fileCall(t, s, "PUT", sb.ID, "content", url.Values{"path": {"/workspace/notes.txt"}}, http.Header{"If-Match": {`"stale"`}}, strings.NewReader("x"))
	var er api.ErrorResponse
	if code != 412 || json.Unmarshal(body, &er) != nil || er.Error.Code != api.CodePreconditionFailed {
		t.Errorf("stale If-Match: %d %s", code, body)
	}
}

// TestFilesDigestMismatch: an upload whose digest does not match gets 422
// and the previous content is intact.
func TestFilesDigestMismatch(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	if _, err := s.Admin.WriteFile(ctx, sb.ID, "/workspace/data.bin", strings.NewReader("original")); err != nil {
		t.Fatal(err)
	}
	other := sha256.Sum256([]byte("something else"))
	good := sha256.Sum256([]byte("replacement"))
	for _, field := range []string{"Repr-Digest", "Content-Digest"} {
		code, _, body := fileCall(t, s, "PUT", sb.ID, "content", url.Values{"path": {"/workspace/data.bin"}},
			http.Header{field: {api.FormatReprDigest(other[:])}}, strings.NewReader("replacement"))
		if code != 422 || !strings.Contains(string(body), "unprocessable") {
			t.Errorf("%s mismatch: %d %s", field, code, body)
		}
	}
	// A digest as a trailer, as the SDK sends it.
	req, _ := http.NewRequest("PUT", s.URL+"/v1/sandboxes/"+sb.ID+"/files/content?path=/workspace/data.bin", io.NopCloser(strings.NewReader("replacement")))
	req.Header.Set("Authorization", "Bearer "+s.AdminKey)
	req.Trailer = http.Header{"Repr-Digest": {api.FormatReprDigest(other[:])}}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 422 {
		t.Errorf("trailer mismatch: %d", resp.StatusCode)
	}
	if got, _ := readAll(t, s.Admin, sb.ID, "/workspace/data.bin"); got != "original" {
		t.Errorf("after refused uploads: %q", got)
	}
	if out := e2etest.MustOK(t, s.Admin, sb.ID, "ls -a /workspace"); strings.Contains(out, ".cove-") {
		t.Errorf("temporary files left: %q", out)
	}
	code, _, body := fileCall(t, s, "PUT", sb.ID, "content", url.Values{"path": {"/workspace/data.bin"}},
		http.Header{"Repr-Digest": {api.FormatReprDigest(good[:])}}, strings.NewReader("replacement"))
	if code != 200 {
		t.Errorf("matching digest: %d %s", code, body)
	}
	if got, _ := readAll(t, s.Admin, sb.ID, "/workspace/data.bin"); got != "replacement" {
		t.Errorf("after a good upload: %q", got)
	}
}

// TestFilesPaths: bad paths get 400; symlinks resolve in the sandbox.
func TestFilesPaths(t *testing.T) {
	s := e2etest.StartServer(t)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	for _, tt := range []struct{ method, what, rawPath string }{
		{"GET", "content", "etc/hostname"},
		{"GET", "content", "/etc/host%00name"},
		{"GET", "content", ""},
		{"GET", "stat", "relative"},
		{"GET", "", "%00"},
		{"PUT", "content", "workspace/x"},
		{"PUT", "content", "/workspace/a%00b"},
		{"DELETE", "", ""},
		{"GET", "archive", "x"},
	} {
		u := s.URL + "/v1/sandboxes/" + sb.ID + "/files"
		if tt.what != "" {
			u += "/" + tt.what
		}
		code, er, body := e2etest.RawRequest(t, tt.method, u+"?path="+tt.rawPath, s.AdminKey, "")
		if code != 400 || er.Error == nil || er.Error.Code != api.CodeInvalidArgument || er.Error.Message == "" {
			t.Errorf("%s %s path=%q: %d %s", tt.method, tt.what, tt.rawPath, code, body)
		}
	}

	// A symlink to /etc/hostname reads the sandbox's file, never the host's.
	e2etest.MustOK(t, s.Admin, sb.ID, "echo sandbox-own-hostname > /etc/hostname && ln -s /etc/hostname /workspace/h && ln -s / /workspace/root", e2etest.AsRoot)
	hostHostname, _ := os.ReadFile("/etc/hostname")
	for _, p := range []string{"/workspace/h", "/workspace/root/etc/hostname"} {
		got, _ := readAll(t, s.Admin, sb.ID, p)
		if got != "sandbox-own-hostname\n" || (len(hostHostname) > 0 && got == string(hostHostname)) {
			t.Errorf("%s read %q", p, got)
		}
	}
	// Writing through the link writes the sandbox's file.
	if _, err := s.Admin.WriteFile(t.Context(), sb.ID, "/workspace/h", strings.NewReader("written-through\n")); err != nil {
		t.Fatal(err)
	}
	if out := e2etest.MustOK(t, s.Admin, sb.ID, "cat /etc/hostname; test -L /workspace/h && echo still-a-link"); out != "written-through\n"+"still-a-link\n" {
		t.Errorf("after a write through the link: %q", out)
	}
	if b, _ := os.ReadFile("/etc/hostname"); !bytes.Equal(b, hostHostname) {
		t.Errorf("the host's /etc/hostname changed")
	}

	// Archives with an entry that leaves the folder are refused whole.
	for name, entries := range map[string][]tarEntry{
		"dotdot":   {{name: "ok.txt", body: "ok"}, {name: "../x", body: "x"}},
		"absolute": {{name: "ok.txt", body: "ok"}, {name: "/tmp/abs", body: "x"}},
		"symlink":  {{name: "ok.txt", body: "ok"}, {name: "esc", link: "../../etc", typ: tar.TypeSymlink}},
		"via link": {{name: "ok.txt", body: "ok"}, {name: "l", link: ".", typ: tar.TypeSymlink}, {name: "l/x", body: "x"}},
		"hardlink": {{name: "ok.txt", body: "ok"}, {name: "hl", link: "../../etc/passwd", typ: tar.TypeLink}},
	} {
		code, _, body := fileCall(t, s, "PUT", sb.ID, "archive", url.Values{"path": {"/workspace/unpack"}}, nil, bytes.NewReader(makeTarGz(t, entries)))
		if code != 400 || !strings.Contains(string(body), "nothing was extracted") {
			t.Errorf("archive %s: %d %s", name, code, body)
		}
	}
	if out := e2etest.MustOK(t, s.Admin, sb.ID, "ls -a /workspace; ls /tmp; test -e /x || echo no-x"); strings.Contains(out, "unpack") || strings.Contains(out, ".cove-") || strings.Contains(out, "abs") || !strings.Contains(out, "no-x") {
		t.Errorf("a refused archive left something: %q", out)
	}
}

type tarEntry struct {
	name, link, body string
	typ              byte
}

func makeTarGz(t testing.TB, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: typ, Mode: 0o644}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if typ == tar.TypeDir {
			h.Mode = 0o755
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

// TestFilesEdit: PATCH with zero or several matches is 409 and changes
// nothing; a stale If-Match is 412.
func TestFilesEdit(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	const orig = "def f():\n    return 1\n\ndef g():\n    return 1\n"
	e, err := s.Admin.WriteFile(ctx, sb.ID, "/workspace/m.py", strings.NewReader(orig))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		edits []api.FileEdit
		opts  []cove.FileOption
		code  api.Code
	}{
		{"no match", []api.FileEdit{{Old: "return 2", New: "return 3"}}, nil, api.CodeConflict},
		{"two matches", []api.FileEdit{{Old: "return 1", New: "return 3"}}, nil, api.CodeConflict},
		{"second edit fails", []api.FileEdit{{Old: "def f", New: "def h"}, {Old: "nope", New: ""}}, nil, api.CodeConflict},
		{"stale If-Match", []api.FileEdit{{Old: "def f", New: "def h"}}, []cove.FileOption{cove.IfMatch("stale0000")}, api.CodePreconditionFailed},
		{"empty old", []api.FileEdit{{Old: "", New: "x"}}, nil, api.CodeInvalidArgument},
	} {
		if _, err := s.Admin.EditFile(ctx, sb.ID, "/workspace/m.py", tt.edits, tt.opts...); errCode(err) != tt.code {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.code)
		}
	}
	if got, f := readAll(t, s.Admin, sb.ID, "/workspace/m.py"); got != orig || f.Version != e.Version {
		t.Errorf("refused edits changed the file: %q", got)
	}
	e2, err := s.Admin.EditFile(ctx, sb.ID, "/workspace/m.py", []api.FileEdit{
		{Old: "f():\n    return 1", New: "f():\n    return 10"},
		{Old: "g():\n    return 1", New: "g():\n    return 20"},
	}, cove.IfMatch(e.Version))
	if err != nil {
		t.Fatal(err)
	}
	if got, f := readAll(t, s.Admin, sb.ID, "/workspace/m.py"); got != "def f():\n    return 10\n\ndef g():\n    return 20\n" || f.Version != e2.Version || e2.Version == e.Version {
		t.Errorf("edited: %q", got)
	}
	code, _, body := fileCall(t, s, "PATCH", sb.ID, "content", url.Values{"path": {"/workspace/m.py"}},
		http.Header{"Content-Type": {"application/json"}}, strings.NewReader(`{"edits":[{"old":"return","new":"r"}]}`))
	if code != 409 || !strings.Contains(string(body), "exactly once") {
		t.Errorf("PATCH on the wire: %d %s", code, body)
	}
}

// TestFilesErrors: what a missing file, a directory, a read-only place and
// a full disk answer, with the old file intact.
func TestFilesErrors(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	disk := int64(64)
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Resources: &api.ResourcesRequest{DiskMiB: &disk}})
	c := s.Admin
	check := func(name string, err error, code api.Code, msg string) {
		t.Helper()
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != code || !strings.Contains(ae.Message, msg) {
			t.Errorf("%s: %v, want %s with %q", name, err, code, msg)
		}
	}
	_, err := c.ReadFile(ctx, sb.ID, "/workspace/nope")
	check("missing file", err, api.CodeNotFound, "does not exist")
	_, err = c.StatFile(ctx, sb.ID, "/nope/deeper")
	check("missing stat", err, api.CodeNotFound, "does not exist")
	_, err = c.ReadFile(ctx, sb.ID, "/workspace")
	check("directory read", err, api.CodeConflict, "is a directory")
	_, err = c.WriteFile(ctx, sb.ID, "/workspace", strings.NewReader("x"))
	check("directory write", err, api.CodeConflict, "is a directory")
	_, err = c.ListFiles(ctx, sb.ID, "/etc/passwd", 1, 0, "")
	check("list a file", err, api.CodeConflict, "not a directory")
	_, err = c.WriteFile(ctx, sb.ID, "/proc/sys/kernel/hostname", strings.NewReader("x"))
	check("proc", err, api.CodePermissionDenied, "/proc")
	_, err = c.WriteFile(ctx, sb.ID, "/.cove/cove-agent", strings.NewReader("x"))
	check("agent binary", err, api.CodePermissionDenied, "/.cove")
	err = c.RemoveFile(ctx, sb.ID, "/.cove/cove-agent")
	check("remove agent binary", err, api.CodePermissionDenied, "/.cove")
	e2etest.MustOK(t, c, sb.ID, "ln -s /proc/sys /workspace/sys", e2etest.AsRoot)
	_, err = c.WriteFile(ctx, sb.ID, "/workspace/sys/kernel/hostname", strings.NewReader("x"))
	check("proc through a link", err, api.CodePermissionDenied, "/proc")

	// A full disk: 507, and the old file stays.
	if _, err := c.WriteFile(ctx, sb.ID, "/workspace/keep.txt", strings.NewReader("keep me")); err != nil {
		t.Fatal(err)
	}
	e2etest.Sh(t, c, sb.ID, "dd if=/dev/zero of=/workspace/fill bs=1M 2>/dev/null; sync")
	big := bytes.Repeat([]byte("y"), 8<<20)
	_, err = c.WriteFile(ctx, sb.ID, "/workspace/keep.txt", bytes.NewReader(big))
	check("full disk", err, api.CodeInsufficientStorage, "disk is full")
	code, _, body := fileCall(t, s, "PUT", sb.ID, "content", url.Values{"path": {"/workspace/keep.txt"}}, nil, bytes.NewReader(big))
	if code != http.StatusInsufficientStorage {
		t.Errorf("full disk on the wire: %d %s", code, body)
	}
	if got, _ := readAll(t, c, sb.ID, "/workspace/keep.txt"); got != "keep me" {
		t.Errorf("after a full disk: %q", got)
	}
	if out := e2etest.MustOK(t, c, sb.ID, "ls -a /workspace"); strings.Contains(out, ".cove-") {
		t.Errorf("temporary files left: %q", out)
	}
}

// TestFilesArchive: a folder up as tar.gz and down again.
func TestFilesArchive(t *testing.T) {
	s := e2etest.StartServer(t)
	ctx := t.Context()
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	tgz := makeTarGz(t, []tarEntry{
		{name: "proj/", typ: tar.TypeDir},
		{name: "proj/README", body: "hello\n"},
		{name: "proj/src/", typ: tar.TypeDir},
		{name: "proj/src/a.go", body: "package a\n"},
		{name: "proj/src/link", link: "a.go", typ: tar.TypeSymlink},
		{name: "proj/up", link: "../README", typ: tar.TypeSymlink},
	})
	res, err := s.Admin.WriteArchive(ctx, sb.ID, "/workspace/up", bytes.NewReader(tgz))
	if err != nil || res.Entries != 6 {
		t.Fatalf("extract: %+v %v", res, err)
	}
	out := e2etest.MustOK(t, s.Admin, sb.ID, "cd /workspace/up/proj && cat README src/link && stat -c '%u %n' README src && readlink up")
	if out != "hello\npackage a\n1000 README\n1000 src\n../README\n" {
		t.Errorf("extracted: %q", out)
	}
	rc, err := s.Admin.ReadArchive(ctx, sb.ID, "/workspace/up")
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
	if got := strings.Join(names, " "); got != "proj/ proj/README proj/src/ proj/src/a.go proj/src/link proj/up" {
		t.Errorf("archive: %s", got)
	}
	if _, err := s.Admin.ReadArchive(ctx, sb.ID, "/workspace/up/proj/README"); errCode(err) != api.CodeConflict {
		t.Errorf("archive of a file: %v", err)
	}
}

// TestFilesCLI runs `cove files` against a sandbox.
func TestFilesCLI(t *testing.T) {
	s := e2etest.StartServer(t)
	if out, errs, code := cli(t, s, "", "create", "--name", "fs"); code != 0 {
		t.Fatalf("create: %q %q", out, errs)
	}
	dir := t.TempDir()
	local := filepath.Join(dir, "local.txt")
	os.WriteFile(local, []byte("line one\nline two\n"), 0o644)
	run := func(stdin string, args ...string) string {
		t.Helper()
		out, errs, code := cli(t, s, stdin, append([]string{"files"}, args...)...)
		if code != 0 {
			t.Fatalf("cove files %v: %q %q %d", args, out, errs, code)
		}
		return out
	}
	fail := func(want string, args ...string) {
		t.Helper()
		out, errs, code := cli(t, s, "", append([]string{"files"}, args...)...)
		if code == 0 || !strings.Contains(errs, want) || !strings.HasPrefix(errs, "cove: ") {
			t.Errorf("cove files %v: %q %q %d, want failure with %q", args, out, errs, code, want)
		}
	}
	run("", "put", local, "fs:/workspace/notes.txt")
	if out := run("", "cat", "fs:/workspace/notes.txt"); out != "line one\nline two\n" {
		t.Errorf("cat: %q", out)
	}
	run("from stdin\n", "put", "-", "fs:/workspace/stdin.txt")
	if out := run("", "cat", "fs:/workspace/stdin.txt"); out != "from stdin\n" {
		t.Errorf("put from stdin: %q", out)
	}
	run("", "edit", "fs:/workspace/notes.txt", "--old", "line two", "--new", "line 2")
	fail("exactly once", "edit", "fs:/workspace/notes.txt", "--old", "line", "--new", "x")
	back := filepath.Join(dir, "back.txt")
	run("", "get", "fs:/workspace/notes.txt", back)
	if b, _ := os.ReadFile(back); string(b) != "line one\nline 2\n" {
		t.Errorf("get: %q", b)
	}
	run("", "mkdir", "fs:/workspace/d/e")
	run("", "mv", "fs:/workspace/notes.txt", "fs:/workspace/d/e/n.txt")
	out := run("", "ls", "fs:/workspace")
	if !strings.Contains(out, "d/") || !strings.Contains(out, "stdin.txt") || strings.Contains(out, "notes.txt") {
		t.Errorf("ls: %q", out)
	}
	var list api.List[api.FileEntry]
	if err := json.Unmarshal([]byte(run("", "ls", "--json", "fs:/workspace/d/e")), &list); err != nil || len(list.Items) != 1 || list.Items[0].Name != "n.txt" {
		t.Errorf("ls --json: %+v %v", list, err)
	}
	fail("not empty", "rm", "fs:/workspace/d")
	run("", "rm", "-r", "fs:/workspace/d")
	fail("does not exist", "cat", "fs:/workspace/d/e/n.txt")

	// Folders: put -r and get -r.
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "sub/deeper"), 0o755)
	os.WriteFile(filepath.Join(tree, "a.txt"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(tree, "sub/deeper/b.txt"), []byte("b"), 0o600)
	os.Symlink("../a.txt", filepath.Join(tree, "sub/link"))
	// What the folder's .coveignore names stays behind; the file itself
	// goes.
	os.WriteFile(filepath.Join(tree, ".coveignore"), []byte("*.log\ncache/\n"), 0o644)
	os.WriteFile(filepath.Join(tree, "sub/x.log"), []byte("x"), 0o644)
	os.MkdirAll(filepath.Join(tree, "cache"), 0o755)
	os.WriteFile(filepath.Join(tree, "cache/c"), []byte("c"), 0o644)
	run("", "put", "-r", tree, "fs:/workspace/tree")
	if out := e2etest.MustOK(t, s.Admin, "fs", "cd /workspace/tree && cat a.txt sub/deeper/b.txt sub/link && stat -c %a sub/deeper/b.txt"); out != "aba600\n" {
		t.Errorf("put -r: %q", out)
	}
	if out := e2etest.MustOK(t, s.Admin, "fs", "cd /workspace/tree && ls -A . sub | tr '\\n' ' '"); strings.Contains(out, "x.log") || strings.Contains(out, "cache") || !strings.Contains(out, ".coveignore") {
		t.Errorf("put -r with a .coveignore: %q; want x.log and cache/ left out, .coveignore in", out)
	}
	got := filepath.Join(dir, "got")
	run("", "get", "-r", "fs:/workspace/tree", got)
	for p, want := range map[string]string{"a.txt": "a", "sub/deeper/b.txt": "b", "sub/link": "a"} {
		if b, err := os.ReadFile(filepath.Join(got, p)); err != nil || string(b) != want {
			t.Errorf("get -r %s: %q %v", p, b, err)
		}
	}
}
