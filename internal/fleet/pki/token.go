package pki

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"strings"
)

// tokenPrefix starts every join token.
const tokenPrefix = "cove-join-"

// MinSecret is the shortest secret a join token may carry (an operator's
// own included).
const MinSecret = 16

// Token is a parsed join token: the CA fingerprint a joining node pins and
// the secret the control plane checks (by its hash).
type Token struct {
	Fingerprint string
	Secret      string
}

// String writes the token as cove-join-<fingerprint>-<secret>.
func (t Token) String() string { return tokenPrefix + t.Fingerprint + "-" + t.Secret }

// Hash is the hash of the token's secret: all the store keeps.
func (t Token) Hash() string { return HashSecret(t.Secret) }

// NewToken makes a token for the CA with a new random secret.
func NewToken(fingerprint string) (Token, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return Token{}, err
	}
	return Token{Fingerprint: fingerprint, Secret: hex.EncodeToString(b)}, nil
}

// ParseToken reads a token written by Token.String (surrounding white
// space is ignored: it is read from a file).
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		return Token{}, errors.New("not a join token: it starts with " + tokenPrefix)
	}
	fp, secret, ok := strings.Cut(rest, "-")
	if !ok || len(fp) != 64 || !isLowerHex(fp) {
		return Token{}, errors.New("not a join token: no CA fingerprint of 64 hex digits")
	}
	if err := ValidSecret(secret); err != nil {
		return Token{}, err
	}
	return Token{Fingerprint: fp, Secret: secret}, nil
}

// ValidSecret checks a token secret: at least MinSecret characters of
// letters, digits, '_' or '.', so it survives files and shells unquoted.
func ValidSecret(secret string) error {
	if len(secret) < MinSecret || len(secret) > 256 {
		return errors.New("a join token's secret is 16 to 256 characters")
	}
	for _, c := range secret {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			return errors.New("a join token's secret holds only letters, digits, '_' and '.'")
		}
	}
	return nil
}

// HashSecret is the hex sha256 of a token secret. A secret is random and
// long, so a plain hash is enough to keep it from readers of the store.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte("cove join token\x00" + secret))
	return hex.EncodeToString(sum[:])
}

// SameHash compares two hashes in constant time.
func SameHash(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

func isLowerHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
