package join_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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

// plane is one control plane's node listener over fakes, served on
// loopback.
type plane struct {
	svc   *join.Service
	url   string
	store *jointest.Store
	reg   *jointest.Registry
	ring  *secrets.Keyring
	key   *secrets.Key // the ring's
	dir   string
	clock *clock
}

type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

func newPlane(t *testing.T, cfg join.Config) *plane {
	t.Helper()
	key := jointest.Key(t)
	p := &plane{store: jointest.NewStore(), reg: jointest.NewRegistry(), ring: secrets.NewKeyring(key), key: key, dir: t.TempDir(), clock: &clock{}}
	cfg.DataDir = p.dir
	p.svc = p.start(t, cfg)
	p.url = jointest.Serve(t, p.svc)
	return p
}

func (p *plane) start(t *testing.T, cfg join.Config) *join.Service {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = p.dir
	}
	s, err := join.New(t.Context(), cfg, join.Deps{Store: p.store, Keyring: p.ring, Registry: p.reg, Now: p.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (p *plane) token(t *testing.T) string {
	t.Helper()
	tok, _, _ := p.svc.Token(t.Context())
	if tok == "" {
		t.Fatal("no join token")
	}
	return tok
}

// node is a node's identity as a test holds it.
type node struct {
	id   string
	key  *ecdsa.PrivateKey
	cert *tls.Certificate
	pool *x509.CertPool
}

// client is an HTTP client over tlsCfg.
func client(tlsCfg *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
}

// post calls path and returns the decoded error of a refusal.
func post(t *testing.T, c *http.Client, url string, in, out any) error {
	t.Helper()
	b, _ := json.Marshal(in)
	resp, err := c.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var er api.ErrorResponse
		if json.Unmarshal(body, &er) != nil || er.Error == nil {
			return errors.New(resp.Status + ": " + string(body))
		}
		return er.Error
	}
	return json.Unmarshal(body, out)
}

func joinRequest(t *testing.T, token, name string) (fleetwire.JoinRequest, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := pki.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.NewCSR(key)
	if err != nil {
		t.Fatal(err)
	}
	return fleetwire.JoinRequest{Token: token, Registration: fleetwire.Registration{Name: name, Addr: "127.0.0.1:1", CSR: string(csr)}}, key
}

// joinNode joins a node named name with the plane's token, the way a node
// does: over TLS pinned to the token's fingerprint.
func (p *plane) joinNode(t *testing.T, name string) node {
	t.Helper()
	tok := p.token(t)
	pt, err := pki.ParseToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	req, key := joinRequest(t, tok, name)
	var adm fleetwire.Admission
	if err := post(t, client(pki.PinnedTLS(pt.Fingerprint)), p.url+fleetwire.PathJoin, req, &adm); err != nil {
		t.Fatalf("join: %v", err)
	}
	cert, err := pki.KeyPair([]byte(adm.Certificate), key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCert([]byte(adm.CA))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return node{id: adm.NodeID, key: key, cert: cert, pool: pool}
}

// as is a client with the node's certificate towards the control plane.
func (n node) as() *http.Client {
	return client(pki.ClientTLS(n.pool, n.cert, fleetwire.ControlURI))
}

func (n node) heartbeat(t *testing.T, p *plane, epoch int64) error {
	t.Helper()
	var ans fleetwire.HeartbeatAnswer
	return post(t, n.as(), p.url+fleetwire.PathHeartbeat, fleetwire.Heartbeat{Epoch: epoch}, &ans)
}

func epochOf(t *testing.T, p *plane, id string) int64 {
	t.Helper()
	n, ok := p.reg.Node(id)
	if !ok {
		t.Fatalf("no node %s in the registry", id)
	}
	return n.Epoch
}

func TestJoinWithToken(t *testing.T) {
	p := newPlane(t, join.Config{})
	n := p.joinNode(t, "alpha")
	if uri, _ := pki.Identity(n.cert.Leaf); uri != fleetwire.NodeURI(n.id) {
		t.Fatalf("the node's certificate names %s, want %s", uri, fleetwire.NodeURI(n.id))
	}
	if _, err := n.cert.Leaf.Verify(x509.VerifyOptions{Roots: n.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the node's certificate does not chain to the CA: %v", err)
	}
	if life := n.cert.Leaf.NotAfter.Sub(time.Now()); life > join.DefaultCertTTL || life < join.DefaultCertTTL-time.Minute {
		t.Fatalf("the node's certificate lives %s, want about %s", life, join.DefaultCertTTL)
	}
	if err := n.heartbeat(t, p, epochOf(t, p, n.id)); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	// The token file: 0600, the token itself.
	st, err := os.Stat(filepath.Join(p.dir, join.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("the token file is %v, want 0600", st.Mode().Perm())
	}
	b, _ := os.ReadFile(filepath.Join(p.dir, join.TokenFileName))
	if strings.TrimSpace(string(b)) != p.token(t) {
		t.Fatalf("the token file holds %q, want the token", b)
	}
	// The store keeps the hash of the secret, never the secret.
	pt, _ := pki.ParseToken(p.token(t))
	for name, v := range p.store.Values() {
		if strings.Contains(v, pt.Secret) {
			t.Fatalf("the store's %s holds the token's secret", name)
		}
	}
	// A second join by the name of a node alive is refused.
	req, _ := joinRequest(t, p.token(t), "alpha")
	var adm fleetwire.Admission
	if err := post(t, client(pki.PinnedTLS(pt.Fingerprint)), p.url+fleetwire.PathJoin, req, &adm); api.ErrorCode(err) != api.CodeConflict {
		t.Fatalf("a second join as alpha: %v, want conflict", err)
	}
}

func TestJoinRefused(t *testing.T) {
	p := newPlane(t, join.Config{TokenTTL: time.Hour})
	good := p.token(t)
	pt, _ := pki.ParseToken(good)
	other, _ := pki.NewToken(strings.Repeat("ab", 32))
	joined := p.joinNode(t, "before-rotation")

	tests := []struct {
		name  string
		token func(t *testing.T) string
	}{
		{"wrong secret", func(*testing.T) string {
			return pki.Token{Fingerprint: pt.Fingerprint, Secret: strings.Repeat("x", 32)}.String()
		}},
		{"another CA's fingerprint", func(*testing.T) string { return pki.Token{Fingerprint: other.Fingerprint, Secret: pt.Secret}.String() }},
		{"not a token", func(*testing.T) string { return "hello" }},
		{"empty", func(*testing.T) string { return "" }},
		{"expired", func(t *testing.T) string {
			p.clock.advance(time.Hour + time.Second)
			t.Cleanup(func() { p.clock.advance(-time.Hour - time.Second) })
			return good
		}},
		{"rotated", func(t *testing.T) string {
			if _, _, err := p.svc.Rotate(t.Context()); err != nil {
				t.Fatal(err)
			}
			return good
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := joinRequest(t, tt.token(t), "refused-"+strings.ReplaceAll(tt.name, " ", "-"))
			var adm fleetwire.Admission
			err := post(t, client(pki.PinnedTLS(pt.Fingerprint)), p.url+fleetwire.PathJoin, req, &adm)
			if api.ErrorCode(err) != api.CodeUnauthenticated {
				t.Fatalf("join: %v (admitted as %q), want unauthenticated", err, adm.NodeID)
			}
		})
	}
	// Joins with the new token work; the node joined before the rotation
	// still heartbeats.
	if tok, _, _ := p.svc.Token(t.Context()); tok == good {
		t.Fatal("the token did not change at the rotation")
	}
	p.joinNode(t, "after-rotation")
	if err := joined.heartbeat(t, p, epochOf(t, p, joined.id)); err != nil {
		t.Fatalf("a node joined before the rotation: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(p.dir, join.TokenFileName))
	if tok, _, _ := p.svc.Token(t.Context()); strings.TrimSpace(string(b)) != tok {
		t.Fatal("the token file does not hold the rotated token")
	}
}

// A node's calls other than join need a certificate of a node of this
// fleet: no certificate, the control plane's own, or one of another CA
// are refused.
func TestNodeCallsNeedANodeCertificate(t *testing.T) {
	p := newPlane(t, join.Config{})
	n := p.joinNode(t, "alpha")

	strangerCA, err := pki.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	strangerKey, _ := pki.NewKey()
	strangerPEM, _ := strangerCA.IssueKey(strangerKey.Public(), fleetwire.NodeURI(n.id), time.Hour, time.Now())
	stranger, _ := pki.KeyPair([]byte(strangerPEM), strangerKey)

	// The control plane's own certificate (cove://control) from a node's
	// API test server's point of view: reach it through NodeClientTLS's
	// client certificate.
	ctl := p.svc.NodeClientTLS(n.id)
	ctlCert, err := ctl.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil {
		t.Fatal(err)
	}

	clients := map[string]*http.Client{
		"no certificate":                client(pki.ClientTLS(n.pool, nil, fleetwire.ControlURI)),
		"another CA's node certificate": client(pki.ClientTLS(n.pool, stranger, fleetwire.ControlURI)),
		"the control plane's":           client(pki.ClientTLS(n.pool, ctlCert, fleetwire.ControlURI)),
	}
	csr, _ := pki.NewCSR(n.key)
	calls := map[string]any{
		fleetwire.PathRegister:  fleetwire.Registration{Name: "alpha"},
		fleetwire.PathHeartbeat: fleetwire.Heartbeat{Epoch: epochOf(t, p, n.id)},
		fleetwire.PathRenew:     fleetwire.RenewRequest{CSR: string(csr)},
	}
	for cname, c := range clients {
		for path, body := range calls {
			t.Run(cname+path, func(t *testing.T) {
				var out json.RawMessage
				err := post(t, c, p.url+path, body, &out)
				if err == nil {
					t.Fatalf("%s answered %s", path, out)
				}
				if code := api.ErrorCode(err); code != api.CodeInternal && code != api.CodeUnauthenticated {
					t.Fatalf("%s: %v, want a refused handshake or unauthenticated", path, err)
				}
			})
		}
	}
	before, _ := p.reg.Node(n.id)
	if before.Heartbeats != 0 {
		t.Fatalf("heartbeats without the node's certificate counted: %d", before.Heartbeats)
	}
}

// The identity comes from the certificate, never the body: node A's
// certificate heartbeats, renews and registers only as A.
func TestActsOnlyAsItself(t *testing.T) {
	p := newPlane(t, join.Config{})
	a := p.joinNode(t, "a")
	b := p.joinNode(t, "b")

	// A heartbeats with B's epoch: the registry hears from A (whose epoch
	// it is not: conflict), never from B.
	err := a.heartbeat(t, p, epochOf(t, p, b.id))
	if api.ErrorCode(err) != api.CodeConflict {
		t.Fatalf("A's heartbeat with B's epoch: %v, want conflict", err)
	}
	if nb, _ := p.reg.Node(b.id); nb.Heartbeats != 0 {
		t.Fatal("A's heartbeat counted for B")
	}
	// A's renewal certifies A, whatever key it sends.
	csr, _ := pki.NewCSR(b.key)
	var ans fleetwire.RenewAnswer
	if err := post(t, a.as(), p.url+fleetwire.PathRenew, fleetwire.RenewRequest{CSR: string(csr)}, &ans); err != nil {
		t.Fatal(err)
	}
	c, _ := pki.ParseCert([]byte(ans.Certificate))
	if uri, _ := pki.Identity(c); uri != fleetwire.NodeURI(a.id) {
		t.Fatalf("A's renewal certified %s", uri)
	}
	// A registers with B's name: it is admitted as A.
	var adm fleetwire.Admission
	if err := post(t, a.as(), p.url+fleetwire.PathRegister, fleetwire.Registration{Name: "b"}, &adm); err != nil {
		t.Fatal(err)
	}
	if adm.NodeID != a.id {
		t.Fatalf("A registered as %q", adm.NodeID)
	}
	if eb := epochOf(t, p, b.id); eb == adm.Epoch {
		t.Fatal("A's registration changed B's epoch")
	}
}

// A join body is bounded: a stranger cannot make the listener read
// without end.
func TestJoinBodyBounded(t *testing.T) {
	p := newPlane(t, join.Config{})
	pt, _ := pki.ParseToken(p.token(t))
	req, _ := joinRequest(t, p.token(t), "big")
	req.Sandboxes = []string{strings.Repeat("x", 2<<20)}
	var adm fleetwire.Admission
	if err := post(t, client(pki.PinnedTLS(pt.Fingerprint)), p.url+fleetwire.PathJoin, req, &adm); api.ErrorCode(err) != api.CodePayloadTooLarge {
		t.Fatalf("a join of 2 MiB: %v, want payload_too_large", err)
	}
	if _, ok := p.reg.Node("n1"); ok {
		t.Fatal("the oversized join was registered")
	}
}

func TestRemovedNodeRefused(t *testing.T) {
	p := newPlane(t, join.Config{})
	n := p.joinNode(t, "gone")
	p.reg.Update(n.id, func(x *jointest.Node) { x.Removed = true })
	csr, _ := pki.NewCSR(n.key)
	for path, body := range map[string]any{
		fleetwire.PathRegister:  fleetwire.Registration{Name: "gone"},
		fleetwire.PathHeartbeat: fleetwire.Heartbeat{Epoch: epochOf(t, p, n.id)},
		fleetwire.PathRenew:     fleetwire.RenewRequest{CSR: string(csr)},
	} {
		var out json.RawMessage
		if err := post(t, n.as(), p.url+path, body, &out); api.ErrorCode(err) != api.CodePermissionDenied {
			t.Fatalf("%s by a removed node: %v, want permission_denied", path, err)
		}
	}
}

func TestPlainHTTPRefused(t *testing.T) {
	p := newPlane(t, join.Config{})
	n := p.joinNode(t, "alpha")
	plain := "http://" + strings.TrimPrefix(p.url, "https://")
	for _, path := range []string{fleetwire.PathJoin, fleetwire.PathHeartbeat} {
		var out json.RawMessage
		err := post(t, http.DefaultClient, plain+path, fleetwire.Heartbeat{Epoch: epochOf(t, p, n.id)}, &out)
		if err == nil || api.ErrorCode(err) != api.CodeInternal || !strings.Contains(err.Error(), "400") {
			t.Fatalf("plain HTTP to %s: %v, want the TLS server's 400", path, err)
		}
	}
	// The handler itself refuses a request that did not come over TLS
	// (served wrongly, behind something that ended TLS).
	rec := httptest.NewRecorder()
	req, _ := joinRequest(t, p.token(t), "plain")
	b, _ := json.Marshal(req)
	p.svc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, fleetwire.PathJoin, bytes.NewReader(b)))
	if rec.Code != http.StatusForbidden {
		t.Fatalf("a join without TLS: %d %s", rec.Code, rec.Body)
	}
}

// The CA is made once and kept sealed: a restart over the same store
// signs with the same CA; the store never holds its key in clear; another
// keyring cannot open it.
func TestCASurvivesRestart(t *testing.T) {
	p := newPlane(t, join.Config{})
	n := p.joinNode(t, "alpha")
	again := p.start(t, join.Config{})
	if again.Fingerprint() != p.svc.Fingerprint() {
		t.Fatal("the CA changed at a restart")
	}
	if tok, _, _ := again.Token(t.Context()); tok != p.token(t) {
		t.Fatal("the join token changed at a restart")
	}
	// A node joined before the restart is served by the new instance.
	p.url = jointest.Serve(t, again)
	if err := n.heartbeat(t, p, epochOf(t, p, n.id)); err != nil {
		t.Fatalf("heartbeat after the restart: %v", err)
	}
	// A replica with its own data dir signs with the same CA; it does not
	// know the token's secret, and does not change it.
	replica := p.start(t, join.Config{DataDir: t.TempDir()})
	if replica.Fingerprint() != p.svc.Fingerprint() {
		t.Fatal("a replica made another CA")
	}
	if tok, _, _ := replica.Token(t.Context()); tok != "" {
		t.Fatalf("a replica without the token file knows the token %q", tok)
	}
	p.joinNode(t, "beta") // the token still admits

	// A rotation by one instance: another over the same data dir reads the
	// new token, the one without it knows it has none.
	rotated, _, err := p.svc.Rotate(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if tok, _, _ := again.Token(t.Context()); tok != rotated {
		t.Fatalf("an instance over the same data dir says the token is %q, not the rotated one", tok)
	}
	if tok, _, _ := replica.Token(t.Context()); tok != "" {
		t.Fatalf("a replica without the token file says the token is %q", tok)
	}

	der, err := x509.MarshalPKCS8PrivateKey(caKeyOf(t, p))
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range p.store.Values() {
		if strings.Contains(v, "PRIVATE KEY") || bytes.Contains([]byte(v), der) {
			t.Fatalf("the store's %s holds the CA key in clear", name)
		}
	}
	if _, err := join.New(t.Context(), join.Config{DataDir: t.TempDir()}, join.Deps{Store: p.store, Keyring: jointest.Keyring(t), Registry: p.reg}); !errors.Is(err, secrets.ErrUnknownKey) {
		t.Fatalf("another keyring opened the CA key: %v", err)
	}
}

// caKeyOf opens the sealed CA key the way the service does.
func caKeyOf(t *testing.T, p *plane) *ecdsa.PrivateKey {
	t.Helper()
	return openCAKey(t, p.store, p.ring)
}

func openCAKey(t *testing.T, store *jointest.Store, ring *secrets.Keyring) *ecdsa.PrivateKey {
	t.Helper()
	v, err := store.FleetValue(context.Background(), join.ValueCA)
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Key string }
	if err := json.Unmarshal([]byte(v), &rec); err != nil {
		t.Fatal(err)
	}
	s, err := secrets.ParseText(rec.Key)
	if err != nil {
		t.Fatal(err)
	}
	pemKey, err := ring.Open("fleet", "ca_key", s)
	if err != nil {
		t.Fatal(err)
	}
	k, err := pki.ParseKey(pemKey)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Replicas starting at once on an empty store agree on one CA.
func TestReplicasAgreeOnTheCA(t *testing.T) {
	store, reg, ring := jointest.NewStore(), jointest.NewRegistry(), jointest.Keyring(t)
	const n = 8
	fps := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := join.New(context.Background(), join.Config{DataDir: t.TempDir()}, join.Deps{Store: store, Keyring: ring, Registry: reg})
			if err != nil {
				t.Error(err)
				return
			}
			fps[i] = s.Fingerprint()
		})
	}
	wg.Wait()
	for _, fp := range fps[1:] {
		if fp != fps[0] {
			t.Fatalf("replicas made different CAs: %v", fps)
		}
	}
}

// A new secrets key (the old one kept to open): the CA key is sealed
// again under the new one, and the CA stays the same.
func TestCAKeySealedAgainAfterAKeyRotation(t *testing.T) {
	p := newPlane(t, join.Config{})
	newKey := jointest.Key(t)
	p.ring = secrets.NewKeyring(newKey, p.key)
	s := p.start(t, join.Config{})
	if s.Fingerprint() != p.svc.Fingerprint() {
		t.Fatal("the CA changed with the secrets key")
	}
	openCAKey(t, p.store, secrets.NewKeyring(newKey)) // fails the test unless sealed under the new key
}

func TestOperatorToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "my-token")
	secret := "operator_supplied_secret_0123456789"
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newPlane(t, join.Config{TokenFile: file})
	if tok := p.token(t); !strings.HasSuffix(tok, "-"+secret) {
		t.Fatalf("the token is %q, want the operator's secret", tok)
	}
	p.joinNode(t, "alpha")

	// A restart with the same file keeps the operator's token; after a
	// rotation, a restart with the same file keeps the rotated one.
	if tok, _, _ := p.start(t, join.Config{TokenFile: file}).Token(t.Context()); !strings.HasSuffix(tok, "-"+secret) {
		t.Fatalf("a restart changed the operator's token to %q", tok)
	}
	rotated, _, err := p.svc.Rotate(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	p.svc = p.start(t, join.Config{TokenFile: file})
	if tok, _, _ := p.svc.Token(t.Context()); tok != rotated {
		t.Fatalf("a restart after a rotation brought back %q", tok)
	}
	pt, _ := pki.ParseToken(rotated)
	old, _ := joinRequest(t, pki.Token{Fingerprint: pt.Fingerprint, Secret: secret}.String(), "old")
	var adm fleetwire.Admission
	if err := post(t, client(pki.PinnedTLS(pt.Fingerprint)), p.url+fleetwire.PathJoin, old, &adm); api.ErrorCode(err) != api.CodeUnauthenticated {
		t.Fatalf("the operator's token rotated away: %v", err)
	}
	// A new operator file's token replaces the rotated one.
	secret2 := "another_operator_secret_987654321"
	if err := os.WriteFile(file, []byte(secret2), 0o600); err != nil {
		t.Fatal(err)
	}
	p.svc = p.start(t, join.Config{TokenFile: file})
	if tok, _, _ := p.svc.Token(t.Context()); !strings.HasSuffix(tok, "-"+secret2) {
		t.Fatalf("a new operator token was not taken: %q", tok)
	}
	p.joinNode(t, "beta")

	if err := os.WriteFile(file, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := join.New(t.Context(), join.Config{DataDir: dir, TokenFile: file}, join.Deps{Store: p.store, Keyring: p.ring, Registry: p.reg}); err == nil {
		t.Fatal("a token secret of 5 characters was taken")
	}
}

// NodeClientTLS reaches the node it names and no other.
func TestNodeClientTLS(t *testing.T) {
	p := newPlane(t, join.Config{})
	n := p.joinNode(t, "alpha")
	m := p.joinNode(t, "beta")
	srv := pki.ServerTLS(n.pool, n.cert, func(uri string) bool { return uri == fleetwire.ControlURI }, true)
	url, _ := jointest.ServeTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, pki.PeerIdentity(r.TLS))
	}), srv)
	get := func(cfg *tls.Config) (string, error) {
		resp, err := client(cfg).Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if who, err := get(p.svc.NodeClientTLS(n.id)); err != nil || who != fleetwire.ControlURI {
		t.Fatalf("the control plane to its node: %q, %v", who, err)
	}
	if _, err := get(p.svc.NodeClientTLS(m.id)); err == nil {
		t.Fatal("the control plane took node alpha for node beta")
	}
	if _, err := get(pki.ClientTLS(m.pool, m.cert, fleetwire.NodeURI(n.id))); err == nil {
		t.Fatal("node beta's certificate was served by node alpha's API")
	}
}
