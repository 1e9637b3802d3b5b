package certreload

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cove test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert, key, pool}
}

// issue writes a leaf for 127.0.0.1 with the serial given to certFile and
// keyFile.
func (ca *testCA) issue(t *testing.T, serial int64, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "cove test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// The key first, then the certificate: a handshake between the two
	// writes sees a pair that does not match and keeps the old one.
	writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}))
	writeFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// served is the leaf's serial and the protocol a handshake with srv gets.
func served(t *testing.T, url string, pool *x509.CertPool) (serial int64, proto string) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.TLS.PeerCertificates[0].SerialNumber.Int64(), resp.Proto
}

// TestReload serves a pair over TLS, swaps it on disk and sees the new
// leaf served without a restart; a broken new pair keeps the last one.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := newCA(t)
	ca.issue(t, 100, certFile, keyFile)
	var logs bytes.Buffer
	p, err := Load(certFile, keyFile, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), TLSConfig: p.ServerConfig()}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { srv.Close(); <-errc })
	url := "https://" + ln.Addr().String() + "/"

	if serial, proto := served(t, url, ca.pool); serial != 100 || proto != "HTTP/2.0" {
		t.Fatalf("first: serial %d over %s, want 100 over HTTP/2.0", serial, proto)
	}
	ca.issue(t, 200, certFile, keyFile)
	if serial, _ := served(t, url, ca.pool); serial != 200 {
		t.Fatalf("after the swap: serial %d, want 200", serial)
	}
	// A broken certificate keeps the last pair served, and is logged.
	writeFile(t, certFile, []byte("not a certificate"))
	if serial, _ := served(t, url, ca.pool); serial != 200 {
		t.Fatalf("after a broken swap: serial %d, want 200 still", serial)
	}
	if !strings.Contains(logs.String(), "does not load") {
		t.Fatalf("a broken pair was not logged: %s", logs.String())
	}
	ca.issue(t, 300, certFile, keyFile)
	if serial, _ := served(t, url, ca.pool); serial != 300 {
		t.Fatalf("after a good swap again: serial %d, want 300", serial)
	}
}

func TestLoadNamesBothFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(certFile, []byte("x"), 0o600)
	os.WriteFile(keyFile, []byte("y"), 0o600)
	_, err := Load(certFile, keyFile, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), certFile) || !strings.Contains(err.Error(), keyFile) {
		t.Fatalf("err %v: want both files named", err)
	}
}
