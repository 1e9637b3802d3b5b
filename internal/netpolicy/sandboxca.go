package netpolicy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// LeafLifetime is how long a leaf of a sandbox's CA is valid; the gateway
// issues a new one well before it ends.
const LeafLifetime = 24 * time.Hour

// SandboxCA is the certificate authority of one sandbox: the gateway signs
// with it the leaves it presents to that sandbox for the hosts of its
// injection rules, and no one else trusts it. Its key is made in memory
// and never leaves it: a sandbox started again (a node restart, a wake)
// gets a new CA. It may sign only leaves (pathlen 0).
type SandboxCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	pem    []byte
	now    func() time.Time
	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// NewSandboxCA makes a CA for the sandbox id. now is the clock (nil:
// time.Now).
func NewSandboxCA(id string, now func() time.Time) (*SandboxCA, error) {
	if now == nil {
		now = time.Now
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	t := now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "cove sandbox " + id + " gateway CA", Organization: []string{"cove"}},
		NotBefore:             t.Add(-time.Hour),
		NotAfter:              t.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &SandboxCA{
		cert: cert, key: key, now: now,
		pem:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		leaves: make(map[string]*tls.Certificate),
	}, nil
}

// CertPEM is the CA's certificate, for the sandbox's CA bundle.
func (ca *SandboxCA) CertPEM() []byte { return ca.pem }

// Certificate is the CA's certificate.
func (ca *SandboxCA) Certificate() *x509.Certificate { return ca.cert }

// leaf returns a leaf for host, from the cache while it has more than a
// quarter of its life left. The caller checks that host is one of the
// sandbox's rules' hosts.
func (ca *SandboxCA) leaf(host string) (*tls.Certificate, error) {
	now := ca.now()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c := ca.leaves[host]; c != nil && c.Leaf.NotAfter.Sub(now) > LeafLifetime/4 {
		return c, nil
	}
	c, err := ca.issue(host, now)
	if err != nil {
		return nil, err
	}
	if len(ca.leaves) >= 4*MaxInjectRules {
		clear(ca.leaves)
	}
	ca.leaves[host] = c
	return c, nil
}

// issue signs a new leaf for host, valid from now for LeafLifetime.
func (ca *SandboxCA) issue(host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: host},
		DNSNames:              []string{host},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(LeafLifetime - 5*time.Minute),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("issue a leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}
