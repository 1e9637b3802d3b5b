package remote

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"slices"

	"github.com/cove-dev/cove/internal/fleet/fleetwire"
)

// TLSConfig is the TLS of calls to one node: it presents the control
// plane's client certificate and accepts only a server certificate that
// chains to the fleet CA and names that node (fleetwire.NodeURI). Host
// names and addresses are not checked: the CA is private and pinned.
func TLSConfig(cert tls.Certificate, ca *x509.CertPool, nodeID string) *tls.Config {
	want := fleetwire.NodeURI(nodeID)
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		// The chain and the identity are verified below, without a host
		// name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return identityError{errors.New("the node presented no certificate")}
			}
			leaf := cs.PeerCertificates[0]
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{
				Roots: ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			}); err != nil {
				return identityError{fmt.Errorf("the node's certificate is not of the fleet: %w", err)}
			}
			if !slices.ContainsFunc(leaf.URIs, func(u *url.URL) bool { return u.String() == want }) {
				return identityError{fmt.Errorf("the certificate does not name node %s", nodeID)}
			}
			return nil
		},
	}
}

// identityError is a peer that is not the node asked for: a call to it
// is not retried.
type identityError struct{ error }

func (e identityError) Unwrap() error { return e.error }
