// Package join is the control plane's node listener (`cove control
// --node-listen`): nodes join it with a join token, register again, renew
// their certificates and heartbeat, all over TLS 1.3.
//
// It keeps the fleet's CA. The CA is made at the first start and its key
// is kept in the store sealed with the service's secrets keyring, so every
// replica over the same store signs with the same CA. The join token
// (pki.Token) carries the CA's fingerprint for the joining node to pin; the
// store keeps only the hash of its secret and its expiry, and a rotation
// replaces them at once. A joined node calls with its certificate, and
// acts only as the node that certificate names: the identity comes from
// the certificate, never from a body.
//
// What a node is (its ID, epoch, assignment, whether it is removed) is the
// Registry's: this package decides only who is calling.
package join

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/fleet/pki"
	"github.com/cove-dev/cove/internal/secrets"
)

// Names of the values this package keeps in the store.
const (
	ValueCA    = "fleet_ca"         // JSON caRecord: the certificate and the sealed key, one value
	ValueToken = "fleet_join_token" // JSON tokenRecord: the secret's hash and the expiry
)

// sealTeam and sealName bind the sealed CA key to its place: a sealed
// value copied to another row does not open.
const (
	sealTeam = "fleet"
	sealName = "ca_key"
)

// TokenFileName is the file under the data dir the join token is written
// to (0600).
const TokenFileName = "join-token"

// Defaults of Config.
const (
	DefaultTokenTTL          = 24 * time.Hour
	DefaultCertTTL           = 24 * time.Hour
	DefaultHeartbeatInterval = 2 * time.Second
)

// maxBody bounds a request body: a registration lists sandboxes and
// templates, a few hundred kilobytes at most.
const maxBody = 1 << 20

// Store keeps the fleet's named values (the CA certificate, the sealed CA
// key, the join token's hash and expiry). FleetValue answers an
// api.Error with api.CodeNotFound for a name never put.
type Store interface {
	FleetValue(ctx context.Context, name string) (string, error)
	PutFleetValue(ctx context.Context, name, value string) error
}

// Creator is a Store that can put a value only where there is none
// (answering conflict otherwise). When the store has it, replicas that
// start at once on an empty store agree on one CA: the first one's.
type Creator interface {
	CreateFleetValue(ctx context.Context, name, value string) error
}

// caRecord is what the store keeps of the CA. One value, so the
// certificate and its key are always written together.
type caRecord struct {
	Cert string `json:"cert"`
	// Key is the PEM key sealed with the keyring (secrets.Sealed.Text).
	Key string `json:"key"`
}

// Registry is the control plane's book of nodes.
type Registry interface {
	// Join admits a node by name with the hash of its join nonce ("" for
	// none): the registry gives the ID, and refuses with conflict a name
	// registered to a node that is alive, unless that node joined with
	// the same nonce hash (compared in constant time): then it answers as
	// that node, its one row registered again.
	Join(ctx context.Context, joinHash string, r fleetwire.Registration) (fleetwire.Admission, error)
	// Register registers the node with that ID again. The answer (of
	// Join too) has NodeID, a new Epoch and Assigned.
	Register(ctx context.Context, nodeID string, r fleetwire.Registration) (fleetwire.Admission, error)
	// Heartbeat records a node's report; conflict for a stale epoch or a
	// node marked lost, permission_denied for a removed node.
	Heartbeat(ctx context.Context, nodeID string, hb fleetwire.Heartbeat) (fleetwire.HeartbeatAnswer, error)
	// Allowed answers permission_denied for a removed node, not_found for
	// an unknown one.
	Allowed(ctx context.Context, nodeID string) error
}

// Config of the node listener's service.
type Config struct {
	// DataDir holds the join token file (<DataDir>/join-token, 0600).
	DataDir string
	// TokenTTL is how long a join token admits joins (default 24h).
	TokenTTL time.Duration
	// TokenFile, when set, holds the operator's own token secret (or a
	// whole token of this CA), used instead of a generated one.
	TokenFile string
	// CertTTL is the lifetime of the certificates issued (default 24h).
	CertTTL time.Duration
	// HeartbeatInterval is how often nodes are told to heartbeat
	// (default 2s).
	HeartbeatInterval time.Duration
}

// Validate checks the config and fills its defaults.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("join: a data dir is required")
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = DefaultTokenTTL
	}
	if c.CertTTL == 0 {
		c.CertTTL = DefaultCertTTL
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.TokenTTL < 0 || c.CertTTL < 0 || c.HeartbeatInterval < 0 {
		return errors.New("join: durations must be positive")
	}
	return nil
}

// Deps are what the service works with.
type Deps struct {
	Store    Store
	Keyring  *secrets.Keyring
	Registry Registry
	Log      *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// tokenRecord is what the store keeps of the join token.
type tokenRecord struct {
	Hash    string    `json:"hash"`
	Expires time.Time `json:"expires"`
	// Operator is the hash of the operator's token (--join-token-file)
	// last installed: a restart with the same file keeps a rotation made
	// since, a new file's token replaces it.
	Operator string `json:"operator,omitempty"`
}

// Service is the node listener.
type Service struct {
	cfg  Config
	d    Deps
	ca   *pki.CA
	ctlK *ecdsa.PrivateKey

	mu      sync.Mutex
	ctlCert *tls.Certificate // the control plane's own, reissued at 2/3 of its life
	token   pki.Token        // the current token, when this replica knows its secret
	expires time.Time
}

// New loads the fleet's CA from the store, or makes it at the first start,
// and makes sure a join token exists. It starts nothing.
func New(ctx context.Context, cfg Config, d Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Store == nil || d.Keyring == nil || d.Registry == nil {
		return nil, errors.New("join: a store, a keyring and a registry are required")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	s := &Service{cfg: cfg, d: d}
	ca, err := s.loadCA(ctx)
	if err != nil {
		return nil, err
	}
	s.ca = ca
	if s.ctlK, err = pki.NewKey(); err != nil {
		return nil, err
	}
	if _, err := s.controlCert(); err != nil {
		return nil, err
	}
	if err := s.loadToken(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// loadCA reads the CA from the store, or makes and stores it. A CA key
// sealed under an older key of the keyring is sealed again under the
// current one.
func (s *Service) loadCA(ctx context.Context) (*pki.CA, error) {
	v, err := s.d.Store.FleetValue(ctx, ValueCA)
	if err == nil {
		return s.openCA(ctx, v)
	}
	if api.ErrorCode(err) != api.CodeNotFound {
		return nil, fmt.Errorf("join: read the fleet CA: %w", err)
	}
	ca, err := pki.NewCA(s.d.Now())
	if err != nil {
		return nil, err
	}
	rec, err := s.sealCA(ca)
	if err != nil {
		return nil, err
	}
	if c, ok := s.d.Store.(Creator); ok {
		err = c.CreateFleetValue(ctx, ValueCA, rec)
		if api.ErrorCode(err) == api.CodeConflict {
			// Another replica made it first: use that one.
			v, err := s.d.Store.FleetValue(ctx, ValueCA)
			if err != nil {
				return nil, fmt.Errorf("join: read the fleet CA: %w", err)
			}
			return s.openCA(ctx, v)
		}
	} else {
		err = s.d.Store.PutFleetValue(ctx, ValueCA, rec)
	}
	if err != nil {
		return nil, fmt.Errorf("join: store the fleet CA: %w", err)
	}
	s.d.Log.Info("made the fleet CA", "fingerprint", ca.Fingerprint())
	return ca, nil
}

// sealCA writes the CA as the store keeps it, its key sealed.
func (s *Service) sealCA(ca *pki.CA) (string, error) {
	cp, kp, err := ca.Marshal()
	if err != nil {
		return "", err
	}
	sealed, err := s.d.Keyring.Seal(sealTeam, sealName, kp)
	if err != nil {
		return "", fmt.Errorf("join: seal the fleet CA's key: %w", err)
	}
	b, err := json.Marshal(caRecord{Cert: string(cp), Key: sealed.Text()})
	return string(b), err
}

// openCA reads the stored CA and opens its key.
func (s *Service) openCA(ctx context.Context, v string) (*pki.CA, error) {
	var rec caRecord
	if err := json.Unmarshal([]byte(v), &rec); err != nil {
		return nil, fmt.Errorf("join: the stored fleet CA: %w", err)
	}
	sealed, err := secrets.ParseText(rec.Key)
	if err != nil {
		return nil, fmt.Errorf("join: the fleet CA's key: %w", err)
	}
	keyPEM, err := s.d.Keyring.Open(sealTeam, sealName, sealed)
	if err != nil {
		return nil, fmt.Errorf("join: the fleet CA's key: %w", err)
	}
	ca, err := pki.ParseCA([]byte(rec.Cert), keyPEM)
	if err != nil {
		return nil, fmt.Errorf("join: the fleet CA: %w", err)
	}
	if sealed.KeyID != s.d.Keyring.CurrentID() {
		again, err := s.sealCA(ca)
		if err != nil {
			return nil, err
		}
		if err := s.d.Store.PutFleetValue(ctx, ValueCA, again); err != nil {
			return nil, fmt.Errorf("join: seal the fleet CA's key again: %w", err)
		}
		s.d.Log.Info("sealed the fleet CA's key with the current secrets key", "key", s.d.Keyring.CurrentID())
	}
	return ca, nil
}

// loadToken makes sure the store has a join token: the operator's (from
// TokenFile), the one this data dir's token file holds, or a new one at
// the first start. A replica that starts on a store with a token it does
// not know the secret of keeps it, and Token answers "".
func (s *Service) loadToken(ctx context.Context) error {
	rec, err := s.tokenRecord(ctx)
	if err != nil && api.ErrorCode(err) != api.CodeNotFound {
		return err
	}
	have := err == nil
	if s.cfg.TokenFile != "" {
		t, err := s.operatorToken()
		if err != nil {
			return err
		}
		if !have || !pki.SameHash(rec.Operator, t.Hash()) {
			return s.putToken(ctx, t, t.Hash())
		}
		// This operator token was installed before; it may have been
		// rotated away since.
	}
	if have {
		if b, err := os.ReadFile(s.tokenPath()); err == nil {
			if t, err := pki.ParseToken(string(b)); err == nil && pki.SameHash(rec.Hash, t.Hash()) && t.Fingerprint == s.ca.Fingerprint() {
				s.setToken(t, rec.Expires)
			}
		}
		return nil
	}
	t, err := pki.NewToken(s.ca.Fingerprint())
	if err != nil {
		return err
	}
	return s.putToken(ctx, t, "")
}

// operatorToken reads the operator's token file: a whole token of this CA,
// or a bare secret.
func (s *Service) operatorToken() (pki.Token, error) {
	b, err := os.ReadFile(s.cfg.TokenFile)
	if err != nil {
		return pki.Token{}, fmt.Errorf("join: the join token file: %w", err)
	}
	text := strings.TrimSpace(string(b))
	if strings.HasPrefix(text, "cove-join-") {
		t, err := pki.ParseToken(text)
		if err != nil {
			return pki.Token{}, fmt.Errorf("join: the join token file: %w", err)
		}
		if t.Fingerprint != s.ca.Fingerprint() {
			return pki.Token{}, errors.New("join: the join token file names another CA than this fleet's")
		}
		return t, nil
	}
	if err := pki.ValidSecret(text); err != nil {
		return pki.Token{}, fmt.Errorf("join: the join token file: %w", err)
	}
	return pki.Token{Fingerprint: s.ca.Fingerprint(), Secret: text}, nil
}

// putToken stores the token's hash with a new expiry and writes the token
// file.
func (s *Service) putToken(ctx context.Context, t pki.Token, operator string) error {
	exp := s.d.Now().Add(s.cfg.TokenTTL).UTC()
	b, err := json.Marshal(tokenRecord{Hash: t.Hash(), Expires: exp, Operator: operator})
	if err != nil {
		return err
	}
	if err := s.d.Store.PutFleetValue(ctx, ValueToken, string(b)); err != nil {
		return fmt.Errorf("join: store the join token: %w", err)
	}
	s.setToken(t, exp)
	return s.writeTokenFile(t)
}

func (s *Service) setToken(t pki.Token, exp time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token, s.expires = t, exp
}

func (s *Service) tokenPath() string { return filepath.Join(s.cfg.DataDir, TokenFileName) }

// writeTokenFile writes the token, 0600, replacing the file whole.
func (s *Service) writeTokenFile(t pki.Token) error {
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return err
	}
	tmp := s.tokenPath() + ".tmp"
	if err := os.WriteFile(tmp, []byte(t.String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("join: write the join token file: %w", err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // an older tmp kept its mode
		return err
	}
	if err := os.Rename(tmp, s.tokenPath()); err != nil {
		return fmt.Errorf("join: write the join token file: %w", err)
	}
	return nil
}

func (s *Service) tokenRecord(ctx context.Context) (tokenRecord, error) {
	v, err := s.d.Store.FleetValue(ctx, ValueToken)
	if err != nil {
		return tokenRecord{}, err
	}
	var rec tokenRecord
	if err := json.Unmarshal([]byte(v), &rec); err != nil {
		return tokenRecord{}, fmt.Errorf("join: the stored join token: %w", err)
	}
	return rec, nil
}

// Token is the current join token (as the store has it now) and its
// expiry. The token is "" when this replica does not know its secret:
// another replica made or rotated it, and this data dir's token file does
// not hold it.
func (s *Service) Token(ctx context.Context) (string, time.Time, error) {
	rec, err := s.tokenRecord(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	s.mu.Lock()
	known := s.token
	s.mu.Unlock()
	if known.Secret != "" && pki.SameHash(rec.Hash, known.Hash()) {
		return known.String(), rec.Expires, nil
	}
	if b, err := os.ReadFile(s.tokenPath()); err == nil {
		if t, err := pki.ParseToken(string(b)); err == nil && pki.SameHash(rec.Hash, t.Hash()) {
			s.setToken(t, rec.Expires)
			return t.String(), rec.Expires, nil
		}
	}
	return "", rec.Expires, nil
}

// Rotate makes a new join token: from now on the old one admits no join
// (nodes that joined with it keep their certificates), and the token file
// holds the new one.
func (s *Service) Rotate(ctx context.Context) (string, time.Time, error) {
	t, err := pki.NewToken(s.ca.Fingerprint())
	if err != nil {
		return "", time.Time{}, err
	}
	operator := ""
	if rec, err := s.tokenRecord(ctx); err == nil {
		operator = rec.Operator // a restart with the same operator file keeps this rotation
	}
	if err := s.putToken(ctx, t, operator); err != nil {
		return "", time.Time{}, err
	}
	s.mu.Lock()
	exp := s.expires
	s.mu.Unlock()
	s.d.Log.Info("rotated the join token", "expires", exp)
	return t.String(), exp, nil
}

// Fingerprint is the fleet CA's fingerprint.
func (s *Service) Fingerprint() string { return s.ca.Fingerprint() }

// CAPEM is the fleet CA's certificate.
func (s *Service) CAPEM() []byte { return s.ca.CertPEM() }

// controlCert is the control plane's own certificate (cove://control),
// issued again once 2/3 of its life has passed; its chain carries the CA
// so a joining node can pin it.
func (s *Service) controlCert() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.d.Now()
	if c := s.ctlCert; c != nil && now.Before(renewAt(c.Leaf)) {
		return c, nil
	}
	p, err := s.ca.IssueKey(s.ctlK.Public(), fleetwire.ControlURI, s.cfg.CertTTL, now)
	if err != nil {
		return nil, err
	}
	c, err := pki.KeyPair(p, s.ctlK, s.ca.Cert)
	if err != nil {
		return nil, err
	}
	s.ctlCert = c
	return c, nil
}

// renewAt is when 2/3 of a certificate's life has passed.
func renewAt(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotBefore.Add(life * 2 / 3)
}

// ListenerTLS is the TLS of the node listener: the control plane's
// certificate, client certificates of nodes only (or none, for a join).
func (s *Service) ListenerTLS() *tls.Config {
	cfg := pki.ServerTLS(s.ca.Pool(), nil, isNodeURI, false)
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.controlCert() }
	return cfg
}

// NodeClientTLS is the TLS of the control plane dialing a node's API: the
// control plane's client certificate, and a server that must be the node
// with that ID.
func (s *Service) NodeClientTLS(nodeID string) *tls.Config {
	cfg := pki.ClientTLS(s.ca.Pool(), nil, fleetwire.NodeURI(nodeID))
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return s.controlCert() }
	return cfg
}

func isNodeURI(uri string) bool {
	id, ok := strings.CutPrefix(uri, fleetwire.NodeURIPrefix)
	return ok && id != "" && !strings.Contains(id, "/")
}
