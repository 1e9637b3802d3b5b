package hostguard

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
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
	cert, caPEM := e2etest.TestCert(t, name)
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
