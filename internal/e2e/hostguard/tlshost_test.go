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
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// tlsHost is an HTTPS server for name in a network namespace this test
// made, joined to the host by a veth pair, with a certificate from a CA of
// its own.
type tlsHost struct {
	ns, hostIf string
	Name, Addr string
	CAPEM      []byte
}

var hostCount atomic.Int64

func startTLSHost(t *testing.T, name string) *tlsHost {
	t.Helper()
	e2etest.RequireRoot(t)
	n := hostCount.Add(1)
	h := &tlsHost{
		ns:     fmt.Sprintf("cvg-%s-%d", e2etest.RunID(), n),
		hostIf: fmt.Sprintf("cvg%s%d", e2etest.RunID()[:6], n),
		Name:   name,
	}
	// This process's own /16 (RunOctet), in a /24 no other test here uses.
	prefix := fmt.Sprintf("10.%d.%d", 200+e2etest.RunOctet(), 100+n)
	h.Addr = prefix + ".2"
	peer := "cvq" + h.hostIf[3:]
	t.Cleanup(h.close)
	for _, args := range [][]string{
		{"netns", "add", h.ns},
		{"link", "add", h.hostIf, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", h.ns},
		{"addr", "add", prefix + ".1/24", "dev", h.hostIf},
		{"link", "set", h.hostIf, "up"},
		{"-n", h.ns, "addr", "add", h.Addr + "/24", "dev", peer},
		{"-n", h.ns, "link", "set", peer, "up"},
		{"-n", h.ns, "link", "set", "lo", "up"},
		{"-n", h.ns, "route", "add", "default", "via", prefix + ".1"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	cert, caPEM := testCert(t, name)
	h.CAPEM = caPEM
	l := h.listen(t, h.Addr+":443")
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

// listen makes a TCP listener inside the host's namespace: a socket
// belongs to the namespace it was made in, wherever it is served from.
func (h *tlsHost) listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	type result struct {
		l   net.Listener
		err error
	}
	rc := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // this thread ends inside the namespace: never unlocked
		ns, err := netns.GetFromName(h.ns)
		if err == nil {
			defer ns.Close()
			err = netns.Set(ns)
		}
		if err != nil {
			rc <- result{nil, err}
			return
		}
		l, err := net.Listen("tcp4", addr)
		rc <- result{l, err}
	}()
	r := <-rc
	if r.err != nil {
		t.Fatalf("listen %s in %s: %v", addr, h.ns, r.err)
	}
	t.Cleanup(func() { r.l.Close() })
	return r.l
}

func (h *tlsHost) close() {
	exec.Command("ip", "link", "del", h.hostIf).Run()
	exec.Command("ip", "netns", "del", h.ns).Run()
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
