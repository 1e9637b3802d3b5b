package pki

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/fleet/fleetwire"
)

func TestParseToken(t *testing.T) {
	fp := strings.Repeat("0a", 32)
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"good", "cove-join-" + fp + "-" + strings.Repeat("s", 20), true},
		{"good with a newline", "cove-join-" + fp + "-" + strings.Repeat("s", 20) + "\n", true},
		{"no prefix", fp + "-" + strings.Repeat("s", 20), false},
		{"short fingerprint", "cove-join-" + fp[:62] + "-" + strings.Repeat("s", 20), false},
		{"upper-case fingerprint", "cove-join-" + strings.ToUpper(fp) + "-" + strings.Repeat("s", 20), false},
		{"short secret", "cove-join-" + fp + "-" + "short", false},
		{"secret with a dash", "cove-join-" + fp + "-" + strings.Repeat("s", 20) + "-x", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := ParseToken(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("ParseToken(%q): %v", tt.in, err)
			}
			if tt.ok && tok.String() != strings.TrimSpace(tt.in) {
				t.Fatalf("round trip: %q", tok.String())
			}
		})
	}
}

func FuzzParseToken(f *testing.F) {
	f.Add("cove-join-" + strings.Repeat("0a", 32) + "-" + strings.Repeat("s", 20))
	f.Add("cove-join--")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			return
		}
		again, err := ParseToken(tok.String())
		if err != nil || again != tok {
			t.Fatalf("%q does not round-trip: %v", s, err)
		}
	})
}

// The CA decides the identity: a request's own names are ignored.
func TestIssueNamesOnlyTheGivenIdentity(t *testing.T) {
	now := time.Now()
	ca, err := NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := NewKey()
	// A request that asks to be the control plane, by name and by URI.
	ctl, _ := url.Parse(fleetwire.ControlURI)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{"control"}, URIs: []*url.URL{ctl}}, key)
	if err != nil {
		t.Fatal(err)
	}
	req := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	p, err := ca.Issue(req, fleetwire.NodeURI("n1"), time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCert(p)
	if err != nil {
		t.Fatal(err)
	}
	if uri, err := Identity(c); err != nil || uri != fleetwire.NodeURI("n1") || len(c.DNSNames) != 0 || c.IsCA {
		t.Fatalf("issued %s %v (DNS %v, CA %v)", uri, err, c.DNSNames, c.IsCA)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	// A round trip of the CA keeps its fingerprint; a key of another CA
	// is refused.
	cp, kp, err := ca.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseCA(cp, kp)
	if err != nil || back.Fingerprint() != ca.Fingerprint() {
		t.Fatalf("ParseCA: %v", err)
	}
	other, _ := NewCA(now)
	_, okp, _ := other.Marshal()
	if _, err := ParseCA(cp, okp); err == nil {
		t.Fatal("a CA certificate was taken with another CA's key")
	}
}

// A nil pool trusts nothing (crypto/x509 would take it for the system's
// roots).
func TestNilPoolTrustsNothing(t *testing.T) {
	ca, err := NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := NewKey()
	p, _ := ca.IssueKey(key.Public(), fleetwire.ControlURI, time.Hour, time.Now())
	cert, _ := KeyPair(p, key, ca.Cert)
	cs := tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert.Leaf, ca.Cert}}
	if err := ClientTLS(nil, nil, fleetwire.ControlURI).VerifyConnection(cs); err == nil {
		t.Fatal("a client with no pool accepted a server")
	}
	if err := ClientTLS(ca.Pool(), nil, fleetwire.ControlURI).VerifyConnection(cs); err != nil {
		t.Fatalf("the CA's pool: %v", err)
	}
	if got := ServerTLS(nil, nil, nil, true).ClientCAs; got == nil {
		t.Fatal("a server with no pool has nil ClientCAs (the system's roots)")
	}
}
