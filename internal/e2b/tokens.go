package e2b

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Tokens make and check sandboxes' access tokens (E2B's
// envdAccessToken). Every sandbox has one, whatever E2B's `secure` says,
// for a sandbox's ID is public (preview host names carry it) and must
// open nothing alone. A token is the sandbox's team and a MAC of the team
// and the sandbox under the server's secret: the sandbox listener learns
// the team from it, and nothing is stored per sandbox.
type Tokens struct {
	secret []byte
}

// NewTokens returns tokens under secret (at least 32 bytes).
func NewTokens(secret []byte) (*Tokens, error) {
	if len(secret) < 32 {
		return nil, fmt.Errorf("the E2B token secret has %d bytes; want at least 32", len(secret))
	}
	return &Tokens{secret: secret}, nil
}

// LoadTokens reads the secret at path, or makes one there (mode 0600) when
// there is none, so tokens stay valid across restarts.
func LoadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		b = make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return LoadTokens(path) // made meanwhile by another start
		} else if err != nil {
			return nil, fmt.Errorf("create the E2B token secret: %w", err)
		}
		if _, err := f.Write(b); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("read the E2B token secret: %w", err)
	}
	return NewTokens(b)
}

// Token is the access token of a team's sandbox.
func (t *Tokens) Token(teamID, sandboxID string) string {
	return teamID + "." + t.mac(teamID, sandboxID)
}

// Team checks token for sandboxID and returns the sandbox's team; ok is
// false for any token not made by Token for this sandbox.
func (t *Tokens) Team(sandboxID, token string) (teamID string, ok bool) {
	teamID, sum, found := strings.Cut(token, ".")
	if !found || teamID == "" || sandboxID == "" {
		return "", false
	}
	if !hmac.Equal([]byte(sum), []byte(t.mac(teamID, sandboxID))) {
		return "", false
	}
	return teamID, true
}

func (t *Tokens) mac(teamID, sandboxID string) string {
	m := hmac.New(sha256.New, t.secret)
	// The team ID holds no '\n', so the pair is read back one way only.
	m.Write([]byte("e2b access token\n" + teamID + "\n" + sandboxID))
	return hex.EncodeToString(m.Sum(nil))
}

// Signature is E2B's signature of a file URL (the SDKs' downloadUrl and
// uploadUrl): "v1_" and the unpadded standard base64 of the SHA-256 of
// "path:operation:user:token", with ":expiration" when the URL expires.
// path and user are the URL's own parameters as the client wrote them
// (relative path, "" for the default user); operation is "read" or
// "write". Anyone holding the sandbox's token can make one.
func Signature(path, operation, user, token, expiration string) string {
	raw := path + ":" + operation + ":" + user + ":" + token
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}
