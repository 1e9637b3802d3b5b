package sources

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/api"
)

func archive(t *testing.T, gz bool, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg {
			h.Size = 2
		}
		h.Mode = 0o644
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("hi"))
		}
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

func TestCheckArchive(t *testing.T) {
	good := []tar.Header{
		{Name: "a/", Typeflag: tar.TypeDir},
		{Name: "a/f", Typeflag: tar.TypeReg},
		{Name: "a/l", Typeflag: tar.TypeSymlink, Linkname: "f"},
		{Name: "b/up", Typeflag: tar.TypeSymlink, Linkname: "../a/f"},
		{Name: "dev", Typeflag: tar.TypeChar},
	}
	for _, gz := range []bool{false, true} {
		if err := CheckArchive(bytes.NewReader(archive(t, gz, good...))); err != nil {
			t.Errorf("good archive (gzip %v): %v", gz, err)
		}
	}
	for name, h := range map[string]tar.Header{
		"dot-dot":       {Name: "a/../../x", Typeflag: tar.TypeReg},
		"absolute":      {Name: "/etc/passwd", Typeflag: tar.TypeReg},
		"symlink out":   {Name: "a/l", Typeflag: tar.TypeSymlink, Linkname: "../../x"},
		"symlink abs":   {Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
		"hard link out": {Name: "h", Typeflag: tar.TypeLink, Linkname: "../x"},
		"hard link abs": {Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"},
	} {
		t.Run(name, func(t *testing.T) {
			err := CheckArchive(bytes.NewReader(archive(t, true, h)))
			if api.ErrorCode(err) != api.CodeInvalidArgument {
				t.Fatalf("CheckArchive = %v; want invalid_argument", err)
			}
		})
	}
	b := archive(t, true, good...)
	if err := CheckArchive(bytes.NewReader(b[:len(b)-10])); api.ErrorCode(err) != api.CodeInvalidArgument {
		t.Fatalf("cut short: %v", err)
	}
	if err := CheckArchive(bytes.NewReader([]byte("plain text, no tar"))); api.ErrorCode(err) != api.CodeInvalidArgument {
		t.Fatalf("not an archive: %v", err)
	}
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestBlobsDigest(t *testing.T) {
	b, err := NewBlobs(filepath.Join(t.TempDir(), "assets"))
	if err != nil {
		t.Fatal(err)
	}
	data := archive(t, true, tar.Header{Name: "f", Typeflag: tar.TypeReg})
	if _, _, err := b.Put(context.Background(), "team_a", bytes.NewReader(data), 1<<20, hexSum([]byte("other"))); api.ErrorCode(err) != api.CodeUnprocessable {
		t.Fatalf("wrong digest: %v", err)
	}
	if _, _, err := b.Put(context.Background(), "team_a", bytes.NewReader(data), 10, ""); api.ErrorCode(err) != api.CodePayloadTooLarge {
		t.Fatalf("too large: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(b.dir, "team_a")); len(ents) != 0 {
		t.Fatalf("refused puts left %v", ents)
	}
	sum, size, err := b.Put(context.Background(), "team_a", bytes.NewReader(data), 1<<20, hexSum(data))
	if err != nil || sum != hexSum(data) || size != int64(len(data)) {
		t.Fatalf("put = %s, %d, %v", sum, size, err)
	}
	rc, err := b.Open(context.Background(), "team_a", sum)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	// Damage on disk is found at the end of a read.
	p := filepath.Join(b.dir, "team_a", sum)
	damaged := bytes.Clone(data)
	damaged[len(damaged)/2] ^= 1
	if err := os.WriteFile(p, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	rc, _ = b.Open(context.Background(), "team_a", sum)
	if _, err := io.ReadAll(rc); err == nil {
		t.Fatal("damaged bytes read as whole")
	}
	rc.Close()
}

func TestBlobsPerTeam(t *testing.T) {
	b, err := NewBlobs(filepath.Join(t.TempDir(), "assets"))
	if err != nil {
		t.Fatal(err)
	}
	data := archive(t, false, tar.Header{Name: "f", Typeflag: tar.TypeReg})
	sum, _, err := b.Put(context.Background(), "team_a", bytes.NewReader(data), 1<<20, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Open(context.Background(), "team_b", sum); api.ErrorCode(err) != api.CodeNotFound {
		t.Fatalf("another team's bytes: %v", err)
	}
	for _, bad := range [][2]string{{"../team_a", sum}, {"team_a", "../../etc/passwd"}, {"team_a", sum[:10]}} {
		if _, err := b.Open(context.Background(), bad[0], bad[1]); err == nil {
			t.Fatalf("Open(%q, %q) accepted", bad[0], bad[1])
		}
	}
	fi, err := os.Stat(filepath.Join(b.dir, "team_a", sum))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("blob mode: %v, %v", fi.Mode(), err)
	}
	// The same bytes again are one file.
	if _, _, err := b.Put(context.Background(), "team_a", bytes.NewReader(data), 1<<20, ""); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(b.dir, "team_a")); len(ents) != 1 {
		t.Fatalf("team_a has %d files", len(ents))
	}
	if err := b.Remove(context.Background(), "team_a", sum); err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(context.Background(), "team_a", sum); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}
