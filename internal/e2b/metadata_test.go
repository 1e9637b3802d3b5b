package e2b

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/internal/e2b/envd/filesystem"
	"github.com/cove-dev/cove/internal/e2b/envd/filesystem/filesystemconnect"
)

// TestFileMetadata: X-Metadata-* headers of an upload become the file's
// user.e2b.* extended attributes (keys lowercased, the first value of a
// repeated header), answered on the upload and on Stat, ListDir and Move;
// an upload without them clears them; multipart applies them to every
// file.
func TestFileMetadata(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	tok := sb.EnvdAccessToken
	hdr := http.Header{
		"Content-Type":       {"application/octet-stream"},
		"X-Metadata-Author":  {"mish", "second"},
		"X-Metadata-PURPOSE": {"upload"},
	}
	resp, body := h.filesRequest("POST", "path=m.txt", tok, hdr, strings.NewReader("x"))
	var up []uploadEntry
	json.Unmarshal([]byte(body), &up)
	want := map[string]string{"author": "mish", "purpose": "upload"}
	if resp.StatusCode != 200 || len(up) != 1 || !cmp.Equal(up[0].Metadata, want) {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	if got := h.files.xattrs["/home/user/m.txt"]; !cmp.Equal(got, map[string]string{"user.e2b.author": "mish", "user.e2b.purpose": "upload"}) {
		t.Errorf("xattrs written: %v", got)
	}

	c := filesystemconnect.NewFilesystemClient(&http.Client{Transport: withHeaders{http.Header{"E2b-Sandbox-Id": {sb.SandboxID}, "X-Access-Token": {tok}}}}, h.side.URL, connect.WithProtoJSON())
	ctx := t.Context()
	st, err := c.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: "m.txt"}))
	if err != nil || !cmp.Equal(st.Msg.Entry.Metadata, want) {
		t.Errorf("stat: %v, %v", st, err)
	}
	// Other user.* attributes are not E2B's metadata.
	h.files.xattrs["/home/user/m.txt"]["user.mime"] = "text/plain"
	l, err := c.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "/home/user"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Msg.Entries {
		if e.Name == "m.txt" && !cmp.Equal(e.Metadata, want) {
			t.Errorf("list: %v", e.Metadata)
		}
	}
	mv, err := c.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: "m.txt", Destination: "n.txt"}))
	if err != nil || !cmp.Equal(mv.Msg.Entry.Metadata, want) {
		t.Errorf("move: %v, %v", mv, err)
	}

	// Written again without: no metadata, none answered.
	resp, body = h.filesRequest("POST", "path=n.txt", tok, http.Header{"Content-Type": {"application/octet-stream"}}, strings.NewReader("y"))
	if resp.StatusCode != 200 || strings.Contains(body, "metadata") || len(h.files.xattrs["/home/user/n.txt"]) != 0 {
		t.Errorf("overwrite without metadata: %d %s %v", resp.StatusCode, body, h.files.xattrs["/home/user/n.txt"])
	}

	var mb bytes.Buffer
	mw := multipart.NewWriter(&mb)
	for _, name := range []string{"one.txt", "two.txt"} {
		ph := textproto.MIMEHeader{}
		ph.Set("Content-Disposition", `form-data; name="file"; filename="`+name+`"`)
		w, _ := mw.CreatePart(ph)
		w.Write([]byte(name))
	}
	mw.Close()
	resp, body = h.filesRequest("POST", "", tok, http.Header{"Content-Type": {mw.FormDataContentType()}, "X-Metadata-Source": {"suite"}}, &mb)
	up = nil
	json.Unmarshal([]byte(body), &up)
	if resp.StatusCode != 200 || len(up) != 2 {
		t.Fatalf("multipart: %d %s", resp.StatusCode, body)
	}
	for _, e := range up {
		if !cmp.Equal(e.Metadata, map[string]string{"source": "suite"}) || h.files.xattrs[e.Path]["user.e2b.source"] != "suite" {
			t.Errorf("multipart %s: %v", e.Path, e.Metadata)
		}
	}
}

// TestFileMetadataRefused: metadata beyond envd's bounds or not printable
// ASCII is refused with 400, and nothing is written.
func TestFileMetadataRefused(t *testing.T) {
	h := newHarness(t)
	sb := h.create("key-a", map[string]any{"templateID": "base"})
	many := http.Header{}
	for i := range 40 {
		many.Set("X-Metadata-K"+strings.Repeat("x", i), strings.Repeat("v", 100))
	}
	for name, hdr := range map[string]http.Header{
		"empty key":        {"X-Metadata-": {"v"}},
		"long key":         {"X-Metadata-" + strings.Repeat("k", maxMetadataKey+1): {"v"}},
		"tab in value":     {"X-Metadata-A": {"a\tb"}},
		"non-ASCII value":  {"X-Metadata-A": {"caf\xc3\xa9"}},
		"too big together": many,
	} {
		t.Run(name, func(t *testing.T) {
			hdr.Set("Content-Type", "application/octet-stream")
			resp, body := h.filesRequest("POST", "path=refused.txt", sb.EnvdAccessToken, hdr, strings.NewReader("x"))
			var e errorBody
			json.Unmarshal([]byte(body), &e)
			if resp.StatusCode != 400 || e.Code != 400 || !strings.Contains(e.Message, "metadata") {
				t.Errorf("%d %s", resp.StatusCode, body)
			}
			if _, ok := h.files.data["/home/user/refused.txt"]; ok {
				t.Error("the file was written")
			}
		})
	}
}
