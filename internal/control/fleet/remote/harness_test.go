package remote_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/fleet/remote"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodeapi"
	"github.com/cove-dev/cove/internal/node/nodetest"
)

// ca is a throwaway fleet CA.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test fleet CA"},
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
	return &ca{cert: cert, key: key, pool: pool}
}

// issue makes a certificate naming uri, good as server and as client.
func (c *ca) issue(t *testing.T, uri string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(uri)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: uri},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{u},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// fleet is a fake node served by the node API on loopback TLS, and the
// control plane's client of it.
type fleet struct {
	ca      *ca
	node    *nodetest.Node
	api     *nodeapi.Server
	srv     *http.Server
	addr    string
	control tls.Certificate
	client  *remote.Client

	mu     sync.Mutex
	exits  []string // "sandbox/command code lost"
	denied []string // "sandbox destination suppressed"
	// injected are the injection reports: "sandbox destination status".
	injected []string
	events   chan struct{}
}

const nodeID = "node_test1"

func newFleet(t *testing.T) *fleet {
	t.Helper()
	return newFleetOf(t, newCA(t), func(n *nodetest.Node) nodeapi.Node { return n })
}

// newFleetOf serves what wrap makes of the fake node.
func newFleetOf(t *testing.T, ca *ca, wrap func(*nodetest.Node) nodeapi.Node) *fleet {
	t.Helper()
	f := &fleet{ca: ca, node: nodetest.New(), events: make(chan struct{}, 1000)}
	log := slog.New(slog.DiscardHandler)
	f.api = nodeapi.New(wrap(f.node), log)
	f.node.OnExit = f.api.OnExit
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	f.srv = f.api.HTTPServer()
	tl := tls.NewListener(ln, nodeapi.TLSConfig(f.ca.issue(t, fleetwire.NodeURI(nodeID)), f.ca.pool))
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.srv.Serve(tl)
	}()
	f.control = f.ca.issue(t, fleetwire.ControlURI)
	f.client = f.newClient(f.addr)
	t.Cleanup(func() {
		f.client.Close()
		f.kill()
		<-done
		f.node.Close()
	})
	return f
}

func (f *fleet) newClient(addr string) *remote.Client {
	return remote.New(remote.Config{
		NodeID: nodeID, Addr: addr, TLS: remote.TLSConfig(f.control, f.ca.pool, nodeID),
		OnExit: func(sandboxID, commandID string, exit node.Exit, lost bool) {
			f.mu.Lock()
			f.exits = append(f.exits, sandboxID+"/"+commandID)
			f.mu.Unlock()
			f.events <- struct{}{}
		},
		OnDenied: func(sandboxID string, o api.NetworkObservation, suppressed int64) {
			f.mu.Lock()
			f.denied = append(f.denied, sandboxID+" "+o.Destination)
			f.mu.Unlock()
			f.events <- struct{}{}
		},
		OnInjected: func(sandboxID string, e netpolicy.InjectEvent) {
			f.mu.Lock()
			f.injected = append(f.injected, fmt.Sprintf("%s %s %d", sandboxID, e.Destination, e.Status))
			f.mu.Unlock()
			f.events <- struct{}{}
		},
		Log: slog.New(slog.DiscardHandler),
	})
}

// kill stops the node's API as a dying node does: its listener and every
// connection close.
func (f *fleet) kill() {
	f.srv.Close()
	f.api.Close()
}

// waitEvents waits for n more events delivered.
func (f *fleet) waitEvents(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for range n {
		select {
		case <-f.events:
		case <-deadline:
			t.Fatalf("events did not arrive: %v %v", f.exits, f.denied)
		}
	}
}

// within fails the test unless fn returns within d.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s took longer than %v", what, d)
	}
}

func code(err error) api.Code {
	var e *api.Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err == nil {
		return ""
	}
	return api.CodeInternal
}

// proxy forwards TCP connections to a target until cut; it keeps
// listening, so that a client reconnects through it.
type proxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  []net.Conn
	hold   bool // connections stay open but nothing is forwarded
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			target := p.target
			p.mu.Unlock()
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); p.copy(up, c) }()
			go func() { defer p.wg.Done(); p.copy(c, up) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		hold := p.hold
		p.mu.Unlock()
		if n > 0 && !hold {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				if cw, ok := dst.(*net.TCPConn); ok {
					cw.CloseWrite()
				}
			}
			return
		}
	}
}

// cut closes every connection through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// blackhole keeps connections open but forwards nothing more, as a
// partitioned network does.
func (p *proxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = true
}

// retarget sends new connections to another address.
func (p *proxy) retarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}
