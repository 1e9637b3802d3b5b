package membership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/fleet/join"
	"github.com/cove-dev/cove/internal/control/fleet/join/jointest"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/fleet/pki"
	"github.com/cove-dev/cove/internal/secrets"
)

// fleet is a control plane's node listener (one or more replicas over one
// store and registry) served on loopback.
type fleet struct {
	store *jointest.Store
	reg   *jointest.Registry
	ring  *secrets.Keyring
	svcs  []*join.Service
	urls  []string
	stops []func()
}

func newFleet(t *testing.T, replicas int, cfg join.Config) *fleet {
	t.Helper()
	f := &fleet{store: jointest.NewStore(), reg: jointest.NewRegistry(), ring: jointest.Keyring(t)}
	dir := t.TempDir()
	for range replicas {
		c := cfg
		c.DataDir = dir
		s, err := join.New(t.Context(), c, join.Deps{Store: f.store, Keyring: f.ring, Registry: f.reg})
		if err != nil {
			t.Fatal(err)
		}
		url, stop := jointest.ServeService(t, s)
		f.svcs, f.urls, f.stops = append(f.svcs, s), append(f.urls, url), append(f.stops, stop)
	}
	return f
}

// tokenFile writes the fleet's token to a 0600 file.
func (f *fleet) tokenFile(t *testing.T) string {
	t.Helper()
	tok, _, _ := f.svcs[0].Token(t.Context())
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func report(context.Context) (fleetwire.Heartbeat, error) {
	return fleetwire.Heartbeat{Capacity: fleetwire.Capacity{CPUs: 2, MemoryMiB: 1024}, Templates: []string{"managed"}, Sandboxes: []string{}}, nil
}

func newMember(t *testing.T, controls []string, tokenFile, dir string) *Member {
	t.Helper()
	return New(Config{Controls: controls, TokenFile: tokenFile, Name: "node-" + filepath.Base(dir), Addr: "127.0.0.1:1", Dir: dir, Report: report})
}

// run runs the member's heartbeats until the end of the test.
func run(t *testing.T, m *Member, onAdmission func(context.Context, fleetwire.Admission) error) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		done <- m.Run(ctx, onAdmission)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Error("Run did not end")
		}
	})
	return done
}

// waitFor waits for cond with a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func noAdmission(context.Context, fleetwire.Admission) error { return nil }

func heartbeats(f *fleet, id string) int {
	n, _ := f.reg.Node(id)
	return n.Heartbeats
}

func TestJoinThenRegisterWithTheCertificate(t *testing.T) {
	f := newFleet(t, 1, join.Config{HeartbeatInterval: 20 * time.Millisecond})
	dir := filepath.Join(t.TempDir(), "fleet")
	tokenFile := f.tokenFile(t)
	m := newMember(t, f.urls, tokenFile, dir)
	adm, err := m.Join(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if adm.NodeID == "" || adm.Epoch == 0 {
		t.Fatalf("admission %+v", adm)
	}
	// The identity is kept owner-only.
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the fleet dir: %v %v", st.Mode().Perm(), err)
	}
	for _, name := range []string{fileIdentity, fileCA, fileNodeID} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v", name, err)
		}
	}
	run(t, m, noAdmission)
	waitFor(t, "two heartbeats", func() bool { return heartbeats(f, adm.NodeID) >= 2 })
	if n, _ := f.reg.Node(adm.NodeID); n.Last.Capacity.CPUs != 2 || len(n.Last.Templates) != 1 {
		t.Fatalf("the heartbeat carried %+v", n.Last)
	}

	// A restart registers with the certificate: the token file is gone
	// and is not needed.
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	again := newMember(t, f.urls, tokenFile, dir)
	adm2, err := again.Join(t.Context())
	if err != nil {
		t.Fatalf("register again: %v", err)
	}
	if adm2.NodeID != adm.NodeID || adm2.Epoch <= adm.Epoch {
		t.Fatalf("registered again as %+v after %+v", adm2, adm)
	}
}

// A refused join leaves nothing behind, and says why.
func TestRefusedJoinLeavesNothing(t *testing.T) {
	f := newFleet(t, 1, join.Config{})
	other := newFleet(t, 1, join.Config{})
	good := f.tokenFile(t)
	tok, _, _ := f.svcs[0].Token(t.Context())
	pt, _ := pki.ParseToken(tok)
	wrong := filepath.Join(t.TempDir(), "wrong")
	_ = os.WriteFile(wrong, []byte(pki.Token{Fingerprint: pt.Fingerprint, Secret: strings.Repeat("z", 32)}.String()), 0o600)

	tests := []struct {
		name      string
		controls  []string
		tokenFile string
		want      string
	}{
		{"wrong token", f.urls, wrong, "join token is not valid"},
		{"a control plane of another CA", other.urls, good, "fingerprint"},
		{"no token file", f.urls, "", "no join token file"},
		{"plain http", []string{"http://" + strings.TrimPrefix(f.urls[0], "https://")}, good, "only https://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "fleet")
			_, err := newMember(t, tt.controls, tt.tokenFile, dir).Join(t.Context())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("join: %v, want %q", err, tt.want)
			}
			// Nothing but the join nonce, kept for the next attempt
			// (owner-only); nothing when no attempt was made.
			ents, err := os.ReadDir(dir)
			switch {
			case errors.Is(err, os.ErrNotExist):
			case err != nil:
				t.Fatal(err)
			case len(ents) != 1 || ents[0].Name() != fileNonce:
				t.Fatalf("a refused join left %v in %s; want only %s", ents, dir, fileNonce)
			default:
				st, err := os.Stat(filepath.Join(dir, fileNonce))
				if err != nil || st.Mode().Perm() != 0o600 {
					t.Fatalf("the join nonce: %v %v; want mode 0600", st.Mode().Perm(), err)
				}
			}
		})
	}
	if _, ok := other.reg.Node("n1"); ok {
		t.Fatal("the other CA's control plane registered the node")
	}
}

// TestJoinRetriedWithTheNonce: a node whose join was registered but whose
// answer never came (here: the identity it was given is not kept) joins
// again, through another replica, with the nonce it kept, and is the
// same node; a restart sends the same nonce. Another host of the same
// name, with its own nonce, is refused with a conflict naming the node.
func TestJoinRetriedWithTheNonce(t *testing.T) {
	f := newFleet(t, 2, join.Config{})
	tokenFile := f.tokenFile(t)
	dir := filepath.Join(t.TempDir(), "fleet")
	first, err := newMember(t, f.urls[:1], tokenFile, dir).Join(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	nonce, err := os.ReadFile(filepath.Join(dir, fileNonce))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, fileNonce)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the join nonce file: %v", err)
	}
	if n, _ := f.reg.Node(first.NodeID); n.JoinHash != pki.HashJoinNonce(strings.TrimSpace(string(nonce))) {
		t.Fatalf("the control plane keeps %q, not the hash of the node's nonce", n.JoinHash)
	}
	// The answer was lost: the node kept nothing but its nonce.
	for _, name := range []string{fileIdentity, fileCA, fileNodeID} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	again, err := newMember(t, f.urls[1:], tokenFile, dir).Join(t.Context())
	if err != nil {
		t.Fatalf("join again with the nonce: %v", err)
	}
	if again.NodeID != first.NodeID || again.Epoch <= first.Epoch {
		t.Fatalf("joined again as %+v after %+v; want the same node, a new epoch", again, first)
	}
	if n, _ := f.reg.Node(first.NodeID); n.Joins != 2 {
		t.Fatalf("the registry saw %d joins of the node; want 2", n.Joins)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, fileNonce)); string(b) != string(nonce) {
		t.Fatal("the join nonce changed between attempts")
	}

	// Another host, the same name, its own data dir: refused.
	twinDir := filepath.Join(t.TempDir(), "fleet")
	_, err = newMember(t, f.urls, tokenFile, twinDir).Join(t.Context())
	if api.ErrorCode(err) != api.CodeConflict || !strings.Contains(err.Error(), "node-fleet") {
		t.Fatalf("a second host joining as node-fleet: %v; want a conflict naming it", err)
	}
	if _, err := os.Stat(filepath.Join(twinDir, fileIdentity)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the refused host kept an identity")
	}
	if n, _ := f.reg.Node(first.NodeID); n.Epoch != again.Epoch {
		t.Fatalf("the refused join changed the node: %+v", n)
	}
}

// A damaged nonce file is an error that says what to do, never a new
// nonce: a new one would lose the registration it stands for.
func TestJoinNonceFileDamaged(t *testing.T) {
	f := newFleet(t, 1, join.Config{})
	dir := filepath.Join(t.TempDir(), "fleet")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fileNonce), []byte("not a nonce\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := newMember(t, f.urls, f.tokenFile(t), dir).Join(t.Context())
	if err == nil || !strings.Contains(err.Error(), fileNonce) {
		t.Fatalf("join with a damaged nonce file: %v", err)
	}
}

// The certificate is renewed at 2/3 of its life, and the node goes on
// heartbeating with the new one.
func TestRenewal(t *testing.T) {
	f := newFleet(t, 1, join.Config{CertTTL: 3 * time.Second, HeartbeatInterval: 50 * time.Millisecond})
	m := newMember(t, f.urls, f.tokenFile(t), t.TempDir())
	adm, err := m.Join(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	first, _ := m.currentCert()
	run(t, m, noAdmission)
	waitFor(t, "a renewed certificate", func() bool {
		c, _ := m.currentCert()
		return c.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0
	})
	renewed, _ := m.currentCert()
	if !renewed.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Fatal("the renewed certificate does not live longer")
	}
	if time.Now().After(first.Leaf.NotBefore.Add(first.Leaf.NotAfter.Sub(first.Leaf.NotBefore))) {
		t.Fatal("renewed only after the certificate expired")
	}
	// Heartbeats go on past the first certificate's end.
	waitFor(t, "heartbeats past the first certificate's end", func() bool { return time.Now().After(first.Leaf.NotAfter) })
	n := heartbeats(f, adm.NodeID)
	waitFor(t, "a heartbeat with the renewed certificate", func() bool { return heartbeats(f, adm.NodeID) > n })
	// The kept identity is the renewed one.
	again := newMember(t, f.urls, "", m.cfg.Dir)
	if ok, err := again.load(); !ok || err != nil {
		t.Fatalf("load: %v %v", ok, err)
	}
	if c, _ := again.currentCert(); c.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Fatal("the renewed certificate was not kept")
	}
}

// A replica that goes away: the node's calls go to the next address.
func TestFailover(t *testing.T) {
	f := newFleet(t, 2, join.Config{HeartbeatInterval: 20 * time.Millisecond})
	m := newMember(t, f.urls, f.tokenFile(t), t.TempDir())
	adm, err := m.Join(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	run(t, m, noAdmission)
	waitFor(t, "a heartbeat", func() bool { return heartbeats(f, adm.NodeID) >= 1 })
	f.stops[0]()
	n := heartbeats(f, adm.NodeID)
	waitFor(t, "heartbeats through the second replica", func() bool { return heartbeats(f, adm.NodeID) >= n+3 })

	// A first join with a dead first address goes to the second.
	m2 := newMember(t, f.urls, f.tokenFile(t), t.TempDir())
	if _, err := m2.Join(t.Context()); err != nil {
		t.Fatalf("join past a dead address: %v", err)
	}
}

// Declared lost (or a stale epoch): the node registers again and the
// caller reconciles with the new admission.
func TestRegisterAgainOnConflict(t *testing.T) {
	f := newFleet(t, 1, join.Config{HeartbeatInterval: 20 * time.Millisecond})
	m := newMember(t, f.urls, f.tokenFile(t), t.TempDir())
	adm, err := m.Join(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []fleetwire.Admission
	run(t, m, func(_ context.Context, a fleetwire.Admission) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, a)
		return nil
	})
	waitFor(t, "a heartbeat", func() bool { return heartbeats(f, adm.NodeID) >= 1 })
	f.reg.Update(adm.NodeID, func(n *jointest.Node) { n.Lost, n.Assigned = true, []string{"sbx-1"} })
	waitFor(t, "a new admission", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	mu.Lock()
	a := got[0]
	mu.Unlock()
	if a.Epoch <= adm.Epoch || len(a.Assigned) != 1 || a.Assigned[0] != "sbx-1" || m.Epoch() != a.Epoch {
		t.Fatalf("admission after the loss: %+v (node epoch %d), first %+v", a, m.Epoch(), adm)
	}
	n := heartbeats(f, adm.NodeID)
	waitFor(t, "heartbeats in the new epoch", func() bool { return heartbeats(f, adm.NodeID) > n })
}

func TestRemovedNodeStops(t *testing.T) {
	f := newFleet(t, 1, join.Config{HeartbeatInterval: 20 * time.Millisecond})
	m := newMember(t, f.urls, f.tokenFile(t), t.TempDir())
	adm, err := m.Join(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	done := run(t, m, noAdmission)
	f.reg.Update(adm.NodeID, func(n *jointest.Node) { n.Removed = true })
	select {
	case err := <-done:
		if api.ErrorCode(err) != api.CodePermissionDenied {
			t.Fatalf("Run: %v, want permission_denied", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a removed node kept running")
	}
	if _, err := newMember(t, f.urls, "", m.cfg.Dir).Join(t.Context()); api.ErrorCode(err) != api.CodePermissionDenied {
		t.Fatalf("a removed node registers again: %v, want permission_denied", err)
	}
}

// A certificate that could not be renewed in time (the control plane was
// away) ends the membership with a clear error instead of failing calls
// forever.
func TestExpiredCertificateStops(t *testing.T) {
	f := newFleet(t, 1, join.Config{CertTTL: time.Second, HeartbeatInterval: 20 * time.Millisecond})
	m := newMember(t, f.urls, f.tokenFile(t), t.TempDir())
	if _, err := m.Join(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.stops[0]() // no renewal possible
	done := run(t, m, noAdmission)
	select {
	case err := <-done:
		if api.ErrorCode(err) != api.CodeUnauthenticated || !strings.Contains(err.Error(), "join again") {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a node with an expired certificate kept running")
	}
	if _, err := newMember(t, f.urls, "", m.cfg.Dir).Join(t.Context()); !strings.Contains(fmt.Sprint(err), "expired") {
		t.Fatalf("Join with an expired certificate: %v", err)
	}
}

// The node API serves only the control plane's client certificate of its
// fleet.
func TestServerTLS(t *testing.T) {
	f := newFleet(t, 1, join.Config{})
	a := newMember(t, f.urls, f.tokenFile(t), t.TempDir())
	admA, err := a.Join(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b := newMember(t, f.urls, f.tokenFile(t), t.TempDir())
	if _, err := b.Join(t.Context()); err != nil {
		t.Fatal(err)
	}
	url, _ := jointest.ServeTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, pki.PeerIdentity(r.TLS))
	}), a.ServerTLS())
	get := func(c *http.Client) (string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	if who, err := get(&http.Client{Transport: transport(f.svcs[0].NodeClientTLS(admA.NodeID))}); err != nil || who != fleetwire.ControlURI {
		t.Fatalf("the control plane: %q %v", who, err)
	}
	bCert, _ := b.currentCert()
	refused := map[string]*http.Client{
		"another node's certificate": {Transport: transport(pki.ClientTLS(b.pool, bCert, fleetwire.NodeURI(admA.NodeID)))},
		"no certificate":             {Transport: transport(pki.ClientTLS(b.pool, nil, fleetwire.NodeURI(admA.NodeID)))},
		"plain http":                 http.DefaultClient,
	}
	for name, c := range refused {
		t.Run(name, func(t *testing.T) {
			u := url
			if name == "plain http" {
				u = "http://" + strings.TrimPrefix(url, "https://")
			}
			resp, err := c.Get(u)
			if err != nil {
				return // refused at the handshake
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if name != "plain http" || resp.StatusCode == http.StatusOK {
				t.Fatalf("served: %d %s", resp.StatusCode, body)
			}
		})
	}
}
