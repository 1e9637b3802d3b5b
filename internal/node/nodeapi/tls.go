package nodeapi

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/url"
	"slices"

	"github.com/cove-dev/cove/internal/fleet/fleetwire"
)

// TLSConfig is the node API listener's TLS: it presents the node's
// certificate and takes only a client certificate that chains to the
// fleet CA and names the control plane (fleetwire.ControlURI). It offers
// HTTP/2 and HTTP/1.1 (the tunnels of DialPort).
func TLSConfig(cert tls.Certificate, ca *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca,
		NextProtos:   []string{"h2", "http/1.1"},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if !names(cs, fleetwire.ControlURI) {
				return errors.New("the client certificate does not name the control plane")
			}
			return nil
		},
	}
}

// names reports that the verified peer certificate carries the URI.
func names(cs tls.ConnectionState, uri string) bool {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return false
	}
	return slices.ContainsFunc(cs.VerifiedChains[0][0].URIs, func(u *url.URL) bool {
		return u.String() == uri
	})
}
