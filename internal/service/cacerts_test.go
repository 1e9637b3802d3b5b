package service

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/node/image"
)

// caPEM makes a self-signed CA certificate, PEM-encoded.
func caPEM(t *testing.T, name string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadCACerts(t *testing.T) {
	dir := t.TempDir()
	a, b, c := caPEM(t, "a"), caPEM(t, "b"), caPEM(t, "c")
	// A directory as update-ca-certificates reads it: *.crt, nested too.
	writeFile(t, filepath.Join(dir, "local/a.crt"), a)
	writeFile(t, filepath.Join(dir, "local/corp/bc.crt"), "# comment\n"+b+c)
	writeFile(t, filepath.Join(dir, "local/README"), "not a certificate")
	writeFile(t, filepath.Join(dir, "one.pem"), b)
	writeFile(t, filepath.Join(dir, "withkey.pem"), a+"-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")
	writeFile(t, filepath.Join(dir, "garbage.pem"), "hello")
	writeFile(t, filepath.Join(dir, "bad/x.crt"), "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")

	for _, tt := range []struct {
		path    string
		n       int
		wantErr string
	}{
		{filepath.Join(dir, "local"), 3, ""},
		{filepath.Join(dir, "one.pem"), 1, ""},
		{NoCACerts, 0, ""},
		{"", 0, ""},
		{filepath.Join(dir, "missing.pem"), 0, "no such file"},
		{filepath.Join(dir, "withkey.pem"), 0, "PRIVATE KEY"},
		{filepath.Join(dir, "garbage.pem"), 0, "no PEM certificate"},
		{filepath.Join(dir, "bad"), 0, "x.crt"},
	} {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			got, n, err := loadCACerts(tt.path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != tt.n || strings.Count(string(got), "BEGIN CERTIFICATE") != tt.n {
				t.Errorf("%d certificates (%d in %q), want %d", n, strings.Count(string(got), "BEGIN CERTIFICATE"), got, tt.n)
			}
			if strings.Contains(string(got), "comment") {
				t.Errorf("text outside the certificates was kept: %q", got)
			}
		})
	}
}

// TestCABundles: an image's bundle plus the operator's certificates, for
// each image with a bundle; none without operator certificates; an
// image whose bundle leads out of its tree is refused and no host file is
// read.
func TestCABundles(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	img := func(name string) image.Image {
		d := filepath.Join(dir, "images", name)
		if err := os.MkdirAll(filepath.Join(d, "rootfs/etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		return image.Image{Name: name, Dir: d, Rootfs: filepath.Join(d, "rootfs")}
	}
	withBundle, without := img("debian"), img("busybox")
	writeFile(t, filepath.Join(withBundle.Rootfs, "etc/ssl/certs/ca-certificates.crt"), "IMAGE-CAS")
	extra := caPEM(t, "operator")
	out := filepath.Join(dir, "data", "ca")
	if err := os.Mkdir(filepath.Dir(out), 0o711); err != nil {
		t.Fatal(err)
	}

	bundles, err := writeCABundles(out, map[string]image.Image{"debian": withBundle, "busybox": without}, []byte(extra), log)
	if err != nil {
		t.Fatal(err)
	}
	if len(bundles) != 1 || bundles["debian"] == "" {
		t.Fatalf("bundles = %v, want one for debian", bundles)
	}
	b, err := os.ReadFile(bundles["debian"])
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "IMAGE-CAS\n"+extra {
		t.Errorf("bundle = %q", b)
	}
	for p, want := range map[string]os.FileMode{out: os.ModeDir | 0o711, bundles["debian"]: 0o644} {
		if st, err := os.Stat(p); err != nil || st.Mode() != want {
			t.Errorf("%s: %v %v, want %v", p, st.Mode(), err, want)
		}
	}

	// Without operator certificates: no bundles, and the old ones go.
	if bundles, err := writeCABundles(out, map[string]image.Image{"debian": withBundle}, nil, log); err != nil || bundles != nil {
		t.Errorf("no certificates: %v, %v", bundles, err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("old bundles left: %v", err)
	}

	// A bundle that is a symlink to a host file.
	secret := filepath.Join(dir, "host-secret")
	writeFile(t, secret, "HOST SECRET")
	evil := img("evil")
	if err := os.MkdirAll(filepath.Join(evil.Rootfs, "etc/ssl/certs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(evil.Rootfs, "etc/ssl/certs/ca-certificates.crt")); err != nil {
		t.Fatal(err)
	}
	if bundles, err := writeCABundles(out, map[string]image.Image{"evil": evil}, []byte(extra), log); err == nil {
		b, _ := os.ReadFile(bundles["evil"])
		t.Errorf("a bundle leading out of the image was followed: %q", b)
	}
}
