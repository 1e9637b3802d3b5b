package pki

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// JoinNonceBytes is the length of a join nonce before its hex encoding.
const JoinNonceBytes = 32

// A join nonce is a random value a node makes once, keeps in its data dir
// and sends with every join attempt: a join by name that brings the nonce
// the name was registered with is the same node retrying a join whose
// answer it never got (a replica died or the connection was cut), and is
// answered as that node; any other join of a live node's name is refused.
// The control plane keeps only its hash.

// NewJoinNonce makes a new random join nonce, hex-encoded.
func NewJoinNonce() (string, error) {
	b := make([]byte, JoinNonceBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// ParseJoinNonce reads a join nonce written by NewJoinNonce (surrounding
// white space is ignored: it is read from a file).
func ParseJoinNonce(s string) (string, error) {
	s = strings.TrimSpace(s)
	if len(s) != 2*JoinNonceBytes || !isLowerHex(s) {
		return "", errors.New("a join nonce is 64 lowercase hex digits")
	}
	return s, nil
}

// HashJoinNonce is the hex sha256 of a join nonce: all the store keeps.
// Compare two with SameHash.
func HashJoinNonce(nonce string) string {
	sum := sha256.Sum256([]byte("cove join nonce\x00" + nonce))
	return hex.EncodeToString(sum[:])
}
