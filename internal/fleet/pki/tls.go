package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/cove-dev/cove/internal/fleet/fleetwire"
)

// ServerTLS is the TLS of a fleet listener: it presents cert, takes only
// client certificates that chain to the CA in caPool, and only those whose
// identity URI allow accepts. With requireClientCert false a client may
// come without a certificate (the node listener's join); the handler then
// finds no verified chain and decides. TLS 1.3 only.
func ServerTLS(caPool *x509.CertPool, cert *tls.Certificate, allow func(uri string) bool, requireClientCert bool) *tls.Config {
	caPool = orEmpty(caPool)
	auth := tls.VerifyClientCertIfGiven
	if requireClientCert {
		auth = tls.RequireAndVerifyClientCert
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: auth,
		ClientCAs:  caPool,
		NextProtos: []string{"h2", "http/1.1"},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.VerifiedChains) == 0 {
				if requireClientCert {
					return errors.New("a client certificate of the fleet is required")
				}
				return nil
			}
			uri, err := Identity(cs.VerifiedChains[0][0])
			if err != nil {
				return err
			}
			if allow == nil || !allow(uri) {
				return fmt.Errorf("client %s is not allowed here", uri)
			}
			return nil
		},
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg
}

// ClientTLS is the TLS of a client dialing a fleet peer: it accepts the
// server only if its certificate chains to the CA in caPool and names
// wantURI; host names and addresses are not checked. cert, when not nil,
// is the client certificate. TLS 1.3 only.
func ClientTLS(caPool *x509.CertPool, cert *tls.Certificate, wantURI string) *tls.Config {
	caPool = orEmpty(caPool)
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain and the URI are checked by VerifyConnection below,
		// instead of the host name.
		InsecureSkipVerify: true,
		NextProtos:         []string{"h2", "http/1.1"},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyServer(cs, caPool, wantURI)
		},
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg
}

// PinnedTLS is the TLS of a node's first join, before it has the CA: it
// accepts the server only if the chain it sends holds a CA certificate
// with that fingerprint, its leaf chains to that CA and names
// fleetwire.ControlURI. TLS 1.3 only.
func PinnedTLS(fingerprint string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // the pinned CA is checked below
		NextProtos:         []string{"h2", "http/1.1"},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) < 2 {
				return errors.New("the server sent no CA with its certificate")
			}
			var ca *x509.Certificate
			for _, c := range cs.PeerCertificates[1:] {
				if c.IsCA && Fingerprint(c) == fingerprint {
					ca = c
					break
				}
			}
			if ca == nil {
				return errors.New("the server's chain holds no CA with the join token's fingerprint")
			}
			pool := x509.NewCertPool()
			pool.AddCert(ca)
			return verifyServer(cs, pool, fleetwire.ControlURI)
		},
	}
}

// orEmpty is the pool, or an empty one for nil: a nil pool would mean
// the system's roots to crypto/x509, and no public CA is trusted here.
func orEmpty(p *x509.CertPool) *x509.CertPool {
	if p == nil {
		return x509.NewCertPool()
	}
	return p
}

// verifyServer checks a server's leaf against the pool (its other
// certificates as intermediates) and its identity.
func verifyServer(cs tls.ConnectionState, pool *x509.CertPool, wantURI string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the server sent no certificate")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         orEmpty(pool),
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return fmt.Errorf("the server's certificate is not of this fleet: %w", err)
	}
	uri, err := Identity(leaf)
	if err != nil {
		return err
	}
	if uri != wantURI {
		return fmt.Errorf("the server is %s, not %s", uri, wantURI)
	}
	return nil
}

// PeerIdentity is the identity URI of the verified client certificate of
// a connection, or "" when the client sent none.
func PeerIdentity(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	uri, err := Identity(cs.VerifiedChains[0][0])
	if err != nil {
		return ""
	}
	return uri
}

// KeyPair makes a tls.Certificate of a PEM certificate, its key, and the
// chain sent after it (the CA, so a joining node can pin it).
func KeyPair(certPEM []byte, key any, chain ...*x509.Certificate) (*tls.Certificate, error) {
	leaf, err := ParseCert(certPEM)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	for _, x := range chain {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	return c, nil
}
