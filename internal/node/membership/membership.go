// Package membership is a node's side of the fleet: it joins the control
// plane's node listener (the first time with the join token, over TLS
// pinned to the CA fingerprint the token carries; later with its
// certificate, never the token), keeps its key, certificate and the CA
// under its directory (0600), heartbeats, renews its certificate at 2/3 of
// its life, registers again when told its epoch is stale, and fails over
// between the control plane's addresses.
//
// A first join may be retried any number of times, through any replica:
// before its first attempt the node makes a join nonce and keeps it under
// its directory (0600); every attempt carries it, and a control plane
// that already registered the name with that nonce (its answer was lost)
// answers as that node instead of refusing the name.
//
// A node refused at join must leave nothing behind but that nonce: Join
// writes nothing else until it is admitted, and the caller joins before
// it makes any nft table or cgroup.
package membership

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/fleet/pki"
)

// Files under Config.Dir.
const (
	fileIdentity = "node.pem" // the certificate, then the key: one file, replaced whole
	fileCA       = "ca.pem"
	fileNodeID   = "node-id" // for people; the certificate is what counts
	fileNonce    = "join-nonce"
)

// DefaultCallTimeout bounds one call to one control address.
const DefaultCallTimeout = 5 * time.Second

// maxAnswer bounds an answer read from the control plane.
const maxAnswer = 4 << 20

// Config of a node's membership.
type Config struct {
	// Controls are the node listener's addresses, https://HOST:PORT; a
	// call goes to the one that answered last and fails over to the
	// others.
	Controls []string
	// TokenFile holds the join token, read at the first join only.
	TokenFile string
	// Name is the node's name; Addr its node API's address (host:port).
	Name, Addr string
	// Dir keeps the node's key, certificate, the CA and its ID (0700,
	// files 0600).
	Dir     string
	Version string
	// Report says what the node has now: capacity, templates, sandboxes
	// (its Epoch is ignored).
	Report func(ctx context.Context) (fleetwire.Heartbeat, error)
	Log    *slog.Logger
	// CallTimeout bounds a call to one address (default 5s).
	CallTimeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Member is a node's membership of the fleet.
type Member struct {
	cfg Config

	mu       sync.Mutex
	ca       *x509.Certificate
	pool     *x509.CertPool
	cert     *tls.Certificate // with its key
	nodeID   string
	epoch    int64
	interval time.Duration
	next     int // the control address to try first
	mtls     *http.Transport
}

// New returns a member; it reads and starts nothing.
func New(cfg Config) *Member {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	return &Member{cfg: cfg, interval: 2 * time.Second}
}

func (m *Member) validate() error {
	if len(m.cfg.Controls) == 0 {
		return errors.New("membership: no control plane address (--control https://ADDR)")
	}
	for _, c := range m.cfg.Controls {
		if !strings.HasPrefix(c, "https://") {
			return fmt.Errorf("membership: control plane address %q: only https:// is spoken", c)
		}
	}
	if m.cfg.Dir == "" || m.cfg.Name == "" {
		return errors.New("membership: a directory and a name are required")
	}
	return nil
}

// NodeID is the node's ID, once joined.
func (m *Member) NodeID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nodeID
}

// Epoch is the node's current epoch.
func (m *Member) Epoch() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch
}

// Join admits the node: with the certificate kept under Dir if there is
// one (a registration), else with the join token. The caller reconciles
// with the admission's Assigned before serving.
func (m *Member) Join(ctx context.Context) (fleetwire.Admission, error) {
	if err := m.validate(); err != nil {
		return fleetwire.Admission{}, err
	}
	ok, err := m.load()
	if err != nil {
		return fleetwire.Admission{}, err
	}
	if ok {
		return m.register(ctx)
	}
	return m.joinWithToken(ctx)
}

// joinWithToken is the first join.
func (m *Member) joinWithToken(ctx context.Context) (fleetwire.Admission, error) {
	if m.cfg.TokenFile == "" {
		return fleetwire.Admission{}, fmt.Errorf("membership: no certificate under %s and no join token file (--join-token-file)", m.cfg.Dir)
	}
	b, err := os.ReadFile(m.cfg.TokenFile)
	if err != nil {
		return fleetwire.Admission{}, fmt.Errorf("membership: the join token file: %w", err)
	}
	if st, err := os.Stat(m.cfg.TokenFile); err == nil && st.Mode().Perm()&0o077 != 0 {
		m.cfg.Log.Warn("the join token file is readable by others than its owner; make it 0600", "file", m.cfg.TokenFile, "mode", st.Mode().Perm())
	}
	tok, err := pki.ParseToken(string(b))
	if err != nil {
		return fleetwire.Admission{}, fmt.Errorf("membership: the join token file %s: %w", m.cfg.TokenFile, err)
	}
	key, err := pki.NewKey()
	if err != nil {
		return fleetwire.Admission{}, err
	}
	csr, err := pki.NewCSR(key)
	if err != nil {
		return fleetwire.Admission{}, err
	}
	reg, err := m.registration(ctx)
	if err != nil {
		return fleetwire.Admission{}, err
	}
	reg.CSR = string(csr)
	nonce, err := m.joinNonce()
	if err != nil {
		return fleetwire.Admission{}, err
	}
	tr := transport(pki.PinnedTLS(tok.Fingerprint))
	defer tr.CloseIdleConnections()
	var adm fleetwire.Admission
	if err := m.call(ctx, tr, fleetwire.PathJoin, fleetwire.JoinRequest{Token: tok.String(), Nonce: nonce, Registration: reg}, &adm); err != nil {
		return fleetwire.Admission{}, fmt.Errorf("membership: join: %w", err)
	}
	ca, err := pki.ParseCert([]byte(adm.CA))
	if err != nil || pki.Fingerprint(ca) != tok.Fingerprint {
		return fleetwire.Admission{}, errors.New("membership: join: the control plane answered with another CA than the join token's")
	}
	cert, err := checkCert(adm.Certificate, key, ca, adm.NodeID)
	if err != nil {
		return fleetwire.Admission{}, fmt.Errorf("membership: join: %w", err)
	}
	if err := m.save(ca, cert, key, adm.NodeID); err != nil {
		return fleetwire.Admission{}, err
	}
	m.admitted(adm)
	m.cfg.Log.Info("joined the fleet", "node", adm.NodeID, "epoch", adm.Epoch)
	return adm, nil
}

// joinNonce is the node's join nonce: the one kept under Dir, or a new
// one, kept there (0600) before it is first sent. Every attempt of the
// first join, in this process or after a restart, sends the same one.
func (m *Member) joinNonce() (string, error) {
	path := filepath.Join(m.cfg.Dir, fileNonce)
	b, err := os.ReadFile(path)
	if err == nil {
		nonce, err := pki.ParseJoinNonce(string(b))
		if err != nil {
			return "", fmt.Errorf("membership: %s: %w (remove it to make a new one)", path, err)
		}
		return nonce, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("membership: %w", err)
	}
	nonce, err := pki.NewJoinNonce()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(m.cfg.Dir, 0o700); err != nil {
		return "", fmt.Errorf("membership: %w", err)
	}
	if err := os.Chmod(m.cfg.Dir, 0o700); err != nil {
		return "", fmt.Errorf("membership: %w", err)
	}
	if err := writeDurable(path, []byte(nonce+"\n")); err != nil {
		return "", fmt.Errorf("membership: keep the join nonce: %w", err)
	}
	return nonce, nil
}

// writeDurable is writeFile synced to disk, the directory's entry too: a
// host that crashes after its join was sent still has the nonce it sent.
func writeDurable(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// register registers again with the node's certificate, asking for a new
// one when the current one is due for renewal.
func (m *Member) register(ctx context.Context) (fleetwire.Admission, error) {
	reg, err := m.registration(ctx)
	if err != nil {
		return fleetwire.Admission{}, err
	}
	var key *ecdsa.PrivateKey
	if m.renewDue() {
		if key, err = pki.NewKey(); err != nil {
			return fleetwire.Admission{}, err
		}
		csr, err := pki.NewCSR(key)
		if err != nil {
			return fleetwire.Admission{}, err
		}
		reg.CSR = string(csr)
	}
	var adm fleetwire.Admission
	if err := m.call(ctx, m.mtlsTransport(), fleetwire.PathRegister, reg, &adm); err != nil {
		return fleetwire.Admission{}, fmt.Errorf("membership: register: %w", err)
	}
	if id := m.NodeID(); adm.NodeID != id {
		return fleetwire.Admission{}, fmt.Errorf("membership: register: admitted as %q, not %q", adm.NodeID, id)
	}
	if key != nil && adm.Certificate != "" {
		if err := m.replaceCert(adm.Certificate, key); err != nil {
			return fleetwire.Admission{}, fmt.Errorf("membership: register: %w", err)
		}
	}
	m.admitted(adm)
	return adm, nil
}

func (m *Member) admitted(adm fleetwire.Admission) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epoch = adm.Epoch
	if adm.HeartbeatMS > 0 {
		m.interval = time.Duration(adm.HeartbeatMS) * time.Millisecond
	}
}

func (m *Member) registration(ctx context.Context) (fleetwire.Registration, error) {
	reg := fleetwire.Registration{Name: m.cfg.Name, Addr: m.cfg.Addr, Version: m.cfg.Version, Templates: []string{}, Sandboxes: []string{}}
	if m.cfg.Report == nil {
		return reg, nil
	}
	r, err := m.cfg.Report(ctx)
	if err != nil {
		return reg, fmt.Errorf("membership: the node's report: %w", err)
	}
	reg.Capacity, reg.Templates, reg.Sandboxes = r.Capacity, r.Templates, r.Sandboxes
	return reg, nil
}

// Run heartbeats until ctx ends (then it returns nil) or the node is
// removed or its certificate refused (an error). It renews the
// certificate at 2/3 of its life; when the control plane answers that its
// epoch is stale or it was declared lost, it registers again and calls
// onAdmission before the next heartbeat. Join must have succeeded.
func (m *Member) Run(ctx context.Context, onAdmission func(context.Context, fleetwire.Admission) error) error {
	if m.NodeID() == "" {
		return errors.New("membership: Run before Join")
	}
	defer m.mtlsTransport().CloseIdleConnections()
	var last fleetwire.Heartbeat
	for {
		t := time.NewTimer(m.heartbeatInterval())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		if err := m.expired(); err != nil {
			return err
		}
		if m.renewDue() {
			if err := m.renew(ctx); err != nil {
				if fatal(err) {
					return err
				}
				m.cfg.Log.Warn("certificate renewal failed; trying again at the next heartbeat", "err", err)
			}
		}
		if m.cfg.Report != nil {
			r, err := m.cfg.Report(ctx)
			if err != nil {
				m.cfg.Log.Warn("the node's report failed; sending the last one", "err", err)
			} else {
				last = r
			}
		}
		hb := last
		hb.Epoch = m.Epoch()
		var ans fleetwire.HeartbeatAnswer
		err := m.call(ctx, m.mtlsTransport(), fleetwire.PathHeartbeat, hb, &ans)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil
		case api.ErrorCode(err) == api.CodeConflict:
			m.cfg.Log.Info("the control plane asks the node to register again", "reason", api.ErrorMessage(err))
			adm, err := m.register(ctx)
			if err != nil {
				if fatal(err) {
					return err
				}
				m.cfg.Log.Warn("registering again failed; trying again at the next heartbeat", "err", err)
				continue
			}
			if err := onAdmission(ctx, adm); err != nil {
				return fmt.Errorf("membership: after registering again: %w", err)
			}
		case fatal(err):
			return fmt.Errorf("membership: heartbeat: %w", err)
		default:
			m.cfg.Log.Warn("heartbeat failed", "err", err)
		}
	}
}

// fatal says the control plane refuses the node for good: it was
// removed, its certificate is not accepted any more, or it does not know
// the node (its book was lost: only a new join helps).
func fatal(err error) bool {
	switch api.ErrorCode(err) {
	case api.CodePermissionDenied, api.CodeUnauthenticated, api.CodeNotFound:
		return true
	}
	return false
}

// expired says the node's certificate has ended (it could not be renewed
// in time): no call can be made with it any more.
func (m *Member) expired() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if end := m.cert.Leaf.NotAfter; m.cfg.Now().After(end) {
		return &api.Error{Code: api.CodeUnauthenticated, Message: fmt.Sprintf(
			"the node certificate expired at %s before it could be renewed; remove %s and join again with a join token",
			end.UTC().Format(time.RFC3339), m.cfg.Dir)}
	}
	return nil
}

// renew asks for a new certificate for a new key.
func (m *Member) renew(ctx context.Context) error {
	key, err := pki.NewKey()
	if err != nil {
		return err
	}
	csr, err := pki.NewCSR(key)
	if err != nil {
		return err
	}
	var ans fleetwire.RenewAnswer
	if err := m.call(ctx, m.mtlsTransport(), fleetwire.PathRenew, fleetwire.RenewRequest{CSR: string(csr)}, &ans); err != nil {
		return fmt.Errorf("membership: renew: %w", err)
	}
	if err := m.replaceCert(ans.Certificate, key); err != nil {
		return fmt.Errorf("membership: renew: %w", err)
	}
	m.cfg.Log.Info("renewed the node certificate")
	return nil
}

func (m *Member) heartbeatInterval() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.interval
}

// renewDue says 2/3 of the certificate's life has passed.
func (m *Member) renewDue() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.cert.Leaf
	return !m.cfg.Now().Before(l.NotBefore.Add(l.NotAfter.Sub(l.NotBefore) * 2 / 3))
}

// ServerTLS is the TLS of the node API: the node's certificate (renewed
// in place), and only the control plane's client certificate of this
// fleet. Join must have succeeded.
func (m *Member) ServerTLS() *tls.Config {
	m.mu.Lock()
	pool := m.pool
	m.mu.Unlock()
	cfg := pki.ServerTLS(pool, nil, func(uri string) bool { return uri == fleetwire.ControlURI }, true)
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return m.currentCert() }
	return cfg
}

func (m *Member) currentCert() (*tls.Certificate, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cert == nil {
		return nil, errors.New("membership: not joined")
	}
	return m.cert, nil
}

// mtlsTransport is the transport of calls made with the node's
// certificate; it presents the current certificate at each handshake.
func (m *Member) mtlsTransport() *http.Transport {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mtls == nil {
		cfg := pki.ClientTLS(m.pool, nil, fleetwire.ControlURI)
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return m.currentCert() }
		m.mtls = transport(cfg)
	}
	return m.mtls
}

func transport(cfg *tls.Config) *http.Transport {
	return &http.Transport{
		TLSClientConfig:     cfg,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 5 * time.Second,
		IdleConnTimeout:     30 * time.Second,
	}
}

// call posts in to path on the control addresses, from the one that
// answered last, and decodes the answer into out. An address that cannot
// be reached or answers unavailable is skipped; any other answer (an
// admission or a refusal) is the control plane's word.
func (m *Member) call(ctx context.Context, tr *http.Transport, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	m.mu.Lock()
	first := m.next
	m.mu.Unlock()
	n := len(m.cfg.Controls)
	var errs []error
	for i := range n {
		idx := (first + i) % n
		addr := m.cfg.Controls[idx]
		err := m.callOne(ctx, tr, addr+path, body, out)
		if err == nil || !failover(err) {
			if err == nil {
				m.mu.Lock()
				m.next = idx
				m.mu.Unlock()
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf("no control plane address answered: %v", errors.Join(errs...))}
}

func failover(err error) bool {
	var e *api.Error
	return !errors.As(err, &e) || e.Code == api.CodeUnavailable
}

func (m *Member) callOne(ctx context.Context, tr *http.Transport, url string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var er api.ErrorResponse
		if json.Unmarshal(b, &er) != nil || er.Error == nil || er.Error.Code == "" {
			return fmt.Errorf("HTTP %d without an error body", resp.StatusCode)
		}
		return er.Error
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	return nil
}

// checkCert reads an issued certificate and checks it is for our key,
// chains to the CA and names the node.
func checkCert(certPEM string, key *ecdsa.PrivateKey, ca *x509.Certificate, nodeID string) (*tls.Certificate, error) {
	c, err := pki.KeyPair([]byte(certPEM), key)
	if err != nil {
		return nil, fmt.Errorf("the issued certificate: %w", err)
	}
	if !key.PublicKey.Equal(c.Leaf.PublicKey) {
		return nil, errors.New("the issued certificate is not for this node's key")
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, fmt.Errorf("the issued certificate: %w", err)
	}
	if uri, err := pki.Identity(c.Leaf); err != nil || uri != fleetwire.NodeURI(nodeID) || nodeID == "" {
		return nil, fmt.Errorf("the issued certificate does not name node %q", nodeID)
	}
	return c, nil
}

// replaceCert takes a renewed certificate for key.
func (m *Member) replaceCert(certPEM string, key *ecdsa.PrivateKey) error {
	m.mu.Lock()
	ca, id := m.ca, m.nodeID
	m.mu.Unlock()
	c, err := checkCert(certPEM, key, ca, id)
	if err != nil {
		return err
	}
	return m.save(ca, c, key, id)
}

// save writes the node's identity (0600, each file replaced whole) and
// makes it current.
func (m *Member) save(ca *x509.Certificate, cert *tls.Certificate, key *ecdsa.PrivateKey, nodeID string) error {
	keyPEM, err := pki.MarshalKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(m.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("membership: %w", err)
	}
	if err := os.Chmod(m.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("membership: %w", err)
	}
	ident := append(pemCert(cert.Leaf), keyPEM...)
	for name, b := range map[string][]byte{fileCA: pemCert(ca), fileNodeID: []byte(nodeID + "\n"), fileIdentity: ident} {
		if err := writeFile(filepath.Join(m.cfg.Dir, name), b); err != nil {
			return fmt.Errorf("membership: %w", err)
		}
	}
	m.setIdentity(ca, cert, nodeID)
	return nil
}

func (m *Member) setIdentity(ca *x509.Certificate, cert *tls.Certificate, nodeID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ca, m.cert, m.nodeID = ca, cert, nodeID
	m.pool = x509.NewCertPool()
	m.pool.AddCert(ca)
}

// load reads the identity kept under Dir; false when there is none.
func (m *Member) load() (bool, error) {
	ident, err := os.ReadFile(filepath.Join(m.cfg.Dir, fileIdentity))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("membership: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(m.cfg.Dir, fileCA))
	if err != nil {
		return false, fmt.Errorf("membership: %w", err)
	}
	ca, err := pki.ParseCert(caPEM)
	if err != nil {
		return false, fmt.Errorf("membership: %s: %w", fileCA, err)
	}
	cert, err := tls.X509KeyPair(ident, ident)
	if err != nil {
		return false, fmt.Errorf("membership: %s: %w", fileIdentity, err)
	}
	key, ok := cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return false, fmt.Errorf("membership: %s: not an ECDSA key", fileIdentity)
	}
	uri, err := pki.Identity(cert.Leaf)
	id, isNode := strings.CutPrefix(uri, fleetwire.NodeURIPrefix)
	if err != nil || !isNode {
		return false, fmt.Errorf("membership: %s is not a node certificate", fileIdentity)
	}
	if now := m.cfg.Now(); now.After(cert.Leaf.NotAfter) {
		return false, &api.Error{Code: api.CodeUnauthenticated, Message: fmt.Sprintf(
			"the node certificate in %s expired at %s; remove that directory and join again with a join token",
			m.cfg.Dir, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))}
	}
	c, err := checkCert(string(pemCert(cert.Leaf)), key, ca, id)
	if err != nil {
		return false, fmt.Errorf("membership: %s: %w", fileIdentity, err)
	}
	m.setIdentity(ca, c, id)
	return true, nil
}

func pemCert(c *x509.Certificate) []byte {
	return pemEncode("CERTIFICATE", c.Raw)
}

func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func pemEncode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
