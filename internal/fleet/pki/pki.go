// Package pki is the fleet's certificate authority and the TLS every
// control↔node connection uses. One CA (ECDSA P-256) signs every
// certificate of a fleet; a certificate names its holder by one URI
// subject alternative name (fleetwire.ControlURI or fleetwire.NodeURI),
// and peers are verified by chain to the pinned CA and by that URI, never
// by host name: the CA is private to the fleet and addresses change.
//
// A node that joins has no CA yet: its join token carries the CA's
// fingerprint (sha256 of the CA certificate's DER), and PinnedTLS accepts
// only a server whose chain holds that CA, as kubeadm's discovery hash
// does.
//
// It imports only the standard library and fleetwire.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"time"
)

// caLife is how long the fleet CA is valid. Node and control certificates
// are short-lived and renewed; the CA is the fleet's root of trust and
// lives as long as the fleet.
const caLife = 20 * 365 * 24 * time.Hour

// clockSkew backdates every certificate a little, so a peer whose clock
// is slightly behind does not see it as not yet valid; a short-lived
// certificate by a quarter of its life at most, so that "renew at 2/3 of
// its life" stays after its issue.
const clockSkew = 5 * time.Minute

// CA is the fleet's certificate authority: its certificate and key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a new CA with a new P-256 key.
func NewCA(now time.Time) (*CA, error) {
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "cove fleet CA"},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Marshal writes the CA as PEM: its certificate and its key (PKCS #8).
// The key is the fleet's secret: the caller seals it before storing it.
func (ca *CA) Marshal() (certPEM, keyPEM []byte, err error) {
	keyPEM, err = MarshalKey(ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return ca.CertPEM(), keyPEM, nil
}

// CertPEM is the CA certificate as PEM.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// ParseCA reads a CA written by Marshal, and checks that the key is the
// certificate's.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("CA certificate: not a CA")
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("CA key does not match the CA certificate")
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Fingerprint is the CA's fingerprint: the hex sha256 of its certificate's
// DER, the part of a join token a node pins.
func (ca *CA) Fingerprint() string { return Fingerprint(ca.Cert) }

// Fingerprint is the hex sha256 of a certificate's DER.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// Pool is a pool holding the CA alone: the only root any fleet peer
// trusts.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue certifies the key of a PEM certificate request for one identity
// URI, valid for ttl from now, for both server and client use. Only the
// request's key is taken: its subject and names are ignored, the identity
// is the caller's to decide.
func (ca *CA) Issue(csrPEM []byte, uri string, ttl time.Duration, now time.Time) ([]byte, error) {
	csr, err := ParseCSR(csrPEM)
	if err != nil {
		return nil, err
	}
	return ca.issue(csr.PublicKey, uri, ttl, now)
}

// IssueKey certifies a public key the caller holds the private key of (the
// control plane's own certificate).
func (ca *CA) IssueKey(pub crypto.PublicKey, uri string, ttl time.Duration, now time.Time) ([]byte, error) {
	return ca.issue(pub, uri, ttl, now)
}

func (ca *CA) issue(pub crypto.PublicKey, uri string, ttl time.Duration, now time.Time) ([]byte, error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("identity %q is not a URI", uri)
	}
	if ttl <= 0 {
		return nil, errors.New("a certificate's lifetime must be positive")
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	skew := min(clockSkew, ttl/4)
	notAfter := now.Add(ttl)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: uri},
		URIs:         []*url.URL{u},
		NotBefore:    now.Add(-skew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issue certificate for %s: %w", uri, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// NewKey makes a P-256 key.
func NewKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// MarshalKey writes a key as PKCS #8 PEM.
func MarshalKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKey reads a key written by MarshalKey.
func ParseKey(keyPEM []byte) (*ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(keyPEM)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an ECDSA key")
	}
	return ek, nil
}

// NewCSR writes a PEM certificate request for key. The request names no
// identity: the CA decides it.
func NewCSR(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// ParseCSR reads a PEM certificate request and checks its signature (the
// requester holds the key) and that its key is P-256 ECDSA.
func ParseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	b, _ := pem.Decode(csrPEM)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("not a PEM certificate request")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	pub, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, errors.New("certificate request: the key must be ECDSA P-256")
	}
	return csr, nil
}

// ParseCert reads one PEM certificate.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// Identity is the one URI a fleet certificate names.
func Identity(cert *x509.Certificate) (string, error) {
	if len(cert.URIs) != 1 {
		return "", fmt.Errorf("certificate names %d URIs, not one", len(cert.URIs))
	}
	return cert.URIs[0].String(), nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}
