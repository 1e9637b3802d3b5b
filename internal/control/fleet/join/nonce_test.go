package join_test

import (
	"strings"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/fleet/join"
	"github.com/cove-dev/cove/internal/fleet/fleetwire"
	"github.com/cove-dev/cove/internal/fleet/pki"
)

// TestJoinNonce: a join that brings the nonce its name was joined with is
// answered as that node, with a certificate for the key it sends now; the
// token is still needed at every attempt; another nonce, or none, is a
// conflict; a malformed nonce is refused before anything is registered.
// The registry is given the nonce's hash, never the nonce.
func TestJoinNonce(t *testing.T) {
	p := newPlane(t, join.Config{})
	tok := p.token(t)
	pt, _ := pki.ParseToken(tok)
	c := client(pki.PinnedTLS(pt.Fingerprint))
	nonce, err := pki.NewJoinNonce()
	if err != nil {
		t.Fatal(err)
	}
	attempt := func(token, nonce string) (fleetwire.Admission, error) {
		req, key := joinRequest(t, token, "gamma")
		req.Nonce = nonce
		var adm fleetwire.Admission
		if err := post(t, c, p.url+fleetwire.PathJoin, req, &adm); err != nil {
			return adm, err
		}
		cert, err := pki.KeyPair([]byte(adm.Certificate), key)
		if err != nil {
			t.Fatalf("the certificate is not for the key sent: %v", err)
		}
		if uri, _ := pki.Identity(cert.Leaf); uri != fleetwire.NodeURI(adm.NodeID) {
			t.Fatalf("the certificate names %s, not node %s", uri, adm.NodeID)
		}
		return adm, nil
	}

	first, err := attempt(tok, nonce)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := p.reg.Node(first.NodeID)
	if n.JoinHash != pki.HashJoinNonce(nonce) || strings.Contains(n.JoinHash, nonce) {
		t.Fatalf("the registry was given %q; want the nonce's hash", n.JoinHash)
	}
	again, err := attempt(tok, nonce)
	if err != nil || again.NodeID != first.NodeID || again.Epoch <= first.Epoch {
		t.Fatalf("a join again with the nonce: %+v, %v; want node %s in a new epoch", again, err, first.NodeID)
	}

	wrong := pki.Token{Fingerprint: pt.Fingerprint, Secret: strings.Repeat("x", 32)}.String()
	other, _ := pki.NewJoinNonce()
	tests := []struct {
		name, token, nonce string
		want               api.Code
	}{
		{"the nonce without the token", wrong, nonce, api.CodeUnauthenticated},
		{"another nonce", tok, other, api.CodeConflict},
		{"no nonce", tok, "", api.CodeConflict},
		{"a short nonce", tok, nonce[:62], api.CodeInvalidArgument},
		{"an upper-case nonce", tok, strings.ToUpper(nonce), api.CodeInvalidArgument},
		{"not hex", tok, strings.Repeat("zz", 32), api.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := attempt(tt.token, tt.nonce)
			if api.ErrorCode(err) != tt.want {
				t.Fatalf("join: %v; want %s", err, tt.want)
			}
			if n, _ := p.reg.Node(first.NodeID); n.Joins != 2 || n.Epoch != again.Epoch {
				t.Fatalf("a refused join reached the registry: %+v", n)
			}
		})
	}
}
