package hostguard

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// tlsHost is an HTTPS server for name on a test host (a network namespace
// the test made, e2etest.StartTestHost), with a certificate from a CA of
// its own.
type tlsHost struct {
	Name, Addr string
	CAPEM      []byte
}

func startTLSHost(t *testing.T, name string) *tlsHost {
	t.Helper()
	host := e2etest.StartTestHost(t)
	h := &tlsHost{Name: name, Addr: host.Addr.String()}
	cert, caPEM := testCert(t, name)
	h.CAPEM = caPEM
	l := host.Listen(t, "tcp", h.Addr+":443").(net.Listener)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s", r.Host)
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}},
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // refused handshakes are what some tests want
	}
	var wg sync.WaitGroup
	wg.Go(func() { srv.ServeTLS(l, "", "") })
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	return h
}

// testCert makes a CA and a certificate for names signed by it; it
// returns the certificate and the CA's, PEM-encoded.
func testCert(t *testing.T, names ...string) (tls.Certificate, []byte) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cove hostguard test CA " + e2etest.RunID()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}
