package remote_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/fleet/remote"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node/nodeapi"
)

// eventually waits for cond with a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func count(calls []string, call string) int {
	n := 0
	for _, c := range calls {
		if c == call {
			n++
		}
	}
	return n
}

// rawClient calls the node API directly with the given client
// certificate (none when nil).
func (f *fleet) rawClient(cert *tls.Certificate) *http.Client {
	conf := remote.TLSConfig(f.control, f.ca.pool, nodeID)
	conf.Certificates = nil
	if cert != nil {
		conf.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: conf, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
}

// TestOperationOnce: a state-changing call sent twice with one operation
// ID runs once, the retry waiting for the first's answer; another ID
// runs again.
func TestOperationOnce(t *testing.T) {
	f := newFleet(t)
	f.node.StartGate = make(chan struct{})
	hc := f.rawClient(&f.control)
	post := func(op string) (int, error) {
		req, _ := http.NewRequest(http.MethodPost, "https://"+f.addr+nodeapi.Prefix+"start", strings.NewReader(`{"spec":{"ID":"sbx_once"}}`))
		req.Header.Set(nodeapi.OperationHeader, op)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	var wg sync.WaitGroup
	codes := make([]int, 2)
	wg.Go(func() { codes[0], _ = post("op-1") })
	eventually(t, "the first start", func() bool { return count(f.node.Calls(), "start sbx_once") == 1 })
	wg.Go(func() { codes[1], _ = post("op-1") })
	close(f.node.StartGate)
	wg.Wait()
	if codes[0] != http.StatusNoContent || codes[1] != http.StatusNoContent {
		t.Fatalf("answers %v", codes)
	}
	if n := count(f.node.Calls(), "start sbx_once"); n != 1 {
		t.Fatalf("one operation ran %d times", n)
	}
	if code, err := post("op-1"); err != nil || code != http.StatusNoContent {
		t.Fatalf("a late retry: %d %v", code, err)
	}
	if code, err := post("op-2"); err != nil || code != http.StatusNoContent {
		t.Fatalf("another operation: %d %v", code, err)
	}
	if n := count(f.node.Calls(), "start sbx_once"); n != 2 {
		t.Fatalf("two operations ran %d times", n)
	}
}

// TestRetryReusesOperation: a call whose connection is cut while the node
// runs it is retried with the same operation ID and runs once.
func TestRetryReusesOperation(t *testing.T) {
	f := newFleet(t)
	p := newProxy(t, f.addr)
	c := f.newClient(p.ln.Addr().String())
	defer c.Close()
	f.node.StartGate = make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- c.Start(t.Context(), spec("sbx_r")) }()
	eventually(t, "the start", func() bool { return count(f.node.Calls(), "start sbx_r") == 1 })
	p.cut()
	// The retry finds the first start running, or done: either way it
	// gets its answer.
	close(f.node.StartGate)
	if err := <-done; err != nil {
		t.Fatalf("the retried start: %v", err)
	}
	if n := count(f.node.Calls(), "start sbx_r"); n != 1 {
		t.Fatalf("the start ran %d times", n)
	}
	if _, ok := f.node.Sandbox("sbx_r"); !ok {
		t.Fatal("the sandbox did not start")
	}
}

// TestRefusesOthers: the node API answers only the control plane's
// certificate over TLS: a node's certificate, no certificate and plain
// HTTP are refused and reach nothing of the node.
func TestRefusesOthers(t *testing.T) {
	f := newFleet(t)
	other := f.ca.issue(t, fleetwire.NodeURI("node_other"))
	stranger := newCA(t).issue(t, fleetwire.ControlURI)
	tests := []struct {
		name string
		do   func() (int, error)
	}{
		{"a node's certificate", func() (int, error) { return get(f.rawClient(&other), "https://"+f.addr) }},
		{"no certificate", func() (int, error) { return get(f.rawClient(nil), "https://"+f.addr) }},
		{"another CA's control certificate", func() (int, error) { return get(f.rawClient(&stranger), "https://"+f.addr) }},
		{"plain HTTP", func() (int, error) { return get(&http.Client{Timeout: 5 * time.Second}, "http://"+f.addr) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, err := tt.do(); err == nil && code/100 == 2 {
				t.Fatalf("answered %d", code)
			}
		})
	}
	if calls := f.node.Calls(); len(calls) != 0 {
		t.Fatalf("the node was called: %v", calls)
	}
}

func get(hc *http.Client, base string) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, base+nodeapi.Prefix+"start", strings.NewReader(`{"spec":{"ID":"sbx_evil"}}`))
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestHandlerChecksIdentity: behind a listener that checks the chain but
// not the identity, the handler still refuses a node's certificate.
func TestHandlerChecksIdentity(t *testing.T) {
	f := newFleet(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	conf := nodeapi.TLSConfig(f.ca.issue(t, fleetwire.NodeURI(nodeID)), f.ca.pool)
	conf.VerifyConnection = nil
	srv := &http.Server{Handler: f.api.Handler()}
	go srv.Serve(tls.NewListener(ln, conf))
	defer srv.Close()
	other := f.ca.issue(t, fleetwire.NodeURI("node_other"))
	code, err := get(f.rawClient(&other), "https://"+ln.Addr().String())
	if err != nil || code != http.StatusForbidden {
		t.Fatalf("a node's certificate: %d %v", code, err)
	}
	if calls := f.node.Calls(); len(calls) != 0 {
		t.Fatalf("the node was called: %v", calls)
	}
}

// TestClientChecksNode: the client talks only to the node it was made
// for: a server with another node's certificate, or another CA's, is
// refused as unavailable before anything is sent.
func TestClientChecksNode(t *testing.T) {
	f := newFleet(t)
	for name, cert := range map[string]tls.Certificate{
		"another node":  f.ca.issue(t, fleetwire.NodeURI("node_other")),
		"another CA":    newCA(t).issue(t, fleetwire.NodeURI(nodeID)),
		"control plane": f.ca.issue(t, fleetwire.ControlURI),
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			must(t, err)
			var got bytes.Buffer
			var mu sync.Mutex
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				io.Copy(&got, r.Body)
			})}
			conf := &tls.Config{Certificates: []tls.Certificate{cert}}
			go srv.Serve(tls.NewListener(ln, conf))
			defer srv.Close()
			c := remote.New(remote.Config{NodeID: nodeID, Addr: ln.Addr().String(), TLS: remote.TLSConfig(f.control, f.ca.pool, nodeID), Log: slog.New(slog.DiscardHandler)})
			defer c.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			s := spec("sbx_secret")
			if err := c.Start(ctx, s); code(err) != api.CodeUnavailable {
				t.Fatalf("start on an impostor: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if strings.Contains(got.String(), "s3cret") || got.Len() > 0 {
				t.Fatalf("the impostor got %q", got.String())
			}
		})
	}
	if slices.Contains(f.node.Calls(), "start sbx_secret") {
		t.Fatal("reached the node")
	}
}

// TestIdempotentRequestOnce: the calls of a request under an
// Idempotency-Key carry operation IDs derived from the key, so the
// request's second attempt, through another replica's client, gets the
// node's answer to the first instead of running the call again.
func TestIdempotentRequestOnce(t *testing.T) {
	f := newFleet(t)
	attempt := func() context.Context {
		d := id.NewDerivation([]byte("seed"), "team_a", "k1", time.Unix(1_700_000_000, 0))
		return id.WithDerivation(t.Context(), d)
	}
	for _, replica := range []string{"a", "b"} {
		c := f.newClient(f.addr)
		if err := c.Start(attempt(), spec("sbx_idem")); err != nil {
			t.Fatalf("start through replica %s: %v", replica, err)
		}
		c.Close()
	}
	if n := count(f.node.Calls(), "start sbx_idem"); n != 1 {
		t.Fatalf("the start ran %d times", n)
	}
}
