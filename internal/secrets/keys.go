// Package secrets holds what cove does with a team's secrets besides
// storing them: sealing values at rest (AES-256-GCM under the server's
// key, with the team and the name as additional data, so a sealed value
// moved to another row does not open), the keys and their rotation, and
// the redaction of secret values from recorded command output.
//
// It imports only the standard library: the control plane seals and opens,
// the node redacts.
package secrets

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// KeySize is the size of a key: AES-256.
const KeySize = 32

// Key is a key that seals secret values. Its ID names it in every sealed
// value, so that a server given a new key knows which rows the old one
// sealed; the ID is derived from the key and tells nothing of it.
type Key struct {
	ID   string
	aead cipher.AEAD
	// mac keys the placeholders (Keyring.Placeholder), apart from the
	// sealing key.
	mac []byte
}

// NewKey makes a Key from KeySize bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("a secrets key is %d bytes, not %d", KeySize, len(raw))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append([]byte("cove secrets key id\x00"), raw...))
	mac := sha256.Sum256(append([]byte("cove placeholder key\x00"), raw...))
	return &Key{ID: hex.EncodeToString(sum[:8]), aead: aead, mac: mac[:]}, nil
}

// GenerateKey returns a new random key, hex-encoded as a key file holds it.
func GenerateKey() ([]byte, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	return []byte(hex.EncodeToString(raw) + "\n"), nil
}

// ParseKey reads a key file's content: 64 hex digits (surrounding
// whitespace ignored) or the 32 raw bytes.
func ParseKey(b []byte) (*Key, error) {
	if t := bytes.TrimSpace(b); len(t) == 2*KeySize {
		raw := make([]byte, KeySize)
		if _, err := hex.Decode(raw, t); err == nil {
			return NewKey(raw)
		}
	}
	if len(b) == KeySize {
		return NewKey(b)
	}
	return nil, fmt.Errorf("want %d hex digits or %d raw bytes (make one with: head -c 32 /dev/urandom > FILE)", 2*KeySize, KeySize)
}

// LoadKey reads a key file. It refuses a file that others than its owner
// may read or write.
func LoadKey(path string) (*Key, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secrets key %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secrets key %s: mode %04o lets others than its owner at it; chmod 600 %s", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	k, err := ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	return k, nil
}

// LoadOrCreateKey reads the key file at path, first writing a new random
// key there (mode 0600) when there is none. It reports whether it made one.
func LoadOrCreateKey(path string) (*Key, bool, error) {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		b, err := GenerateKey()
		if err != nil {
			return nil, false, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, false, fmt.Errorf("create secrets key: %w", err)
		}
		_, werr := f.Write(b)
		if serr := f.Sync(); werr == nil {
			werr = serr
		}
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			os.Remove(path)
			return nil, false, fmt.Errorf("write secrets key: %w", werr)
		}
		k, err := LoadKey(path)
		return k, true, err
	}
	k, err := LoadKey(path)
	return k, false, err
}

// Sealed is a value sealed under a key: what the store keeps.
type Sealed struct {
	KeyID      string
	Nonce      []byte
	Ciphertext []byte
}

// textPrefix starts a sealed value written as text. A value stored before
// sealing never starts so: it tells the two apart, and the version lets
// another form follow.
const textPrefix = "sealed1:"

// Text writes a sealed value as one string, for a store column that holds
// text: sealed1:KEYID:NONCE:CIPHERTEXT, the last two in base64.
func (s Sealed) Text() string {
	return textPrefix + s.KeyID + ":" + base64.StdEncoding.EncodeToString(s.Nonce) + ":" + base64.StdEncoding.EncodeToString(s.Ciphertext)
}

// IsText reports whether t is a sealed value written by Text (or an
// altered one, which ParseText refuses): anything else in a column of
// sealed values was stored before sealing and is still clear.
func IsText(t string) bool { return strings.HasPrefix(t, textPrefix) }

// ParseText reads a sealed value written by Text.
func ParseText(t string) (Sealed, error) {
	parts := strings.Split(strings.TrimPrefix(t, textPrefix), ":")
	if !IsText(t) || len(parts) != 3 || parts[0] == "" {
		return Sealed{}, fmt.Errorf("not a sealed value: %w", ErrOpen)
	}
	nonce, err1 := base64.StdEncoding.DecodeString(parts[1])
	ct, err2 := base64.StdEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil {
		return Sealed{}, fmt.Errorf("sealed value is not base64: %w", ErrOpen)
	}
	return Sealed{KeyID: parts[0], Nonce: nonce, Ciphertext: ct}, nil
}

// Keyring seals with its current key and opens with any of its keys: the
// current one and the old ones given for a rotation.
type Keyring struct {
	current *Key
	old     []*Key
}

// NewKeyring returns a keyring sealing with current; old keys only open.
func NewKeyring(current *Key, old ...*Key) *Keyring {
	return &Keyring{current: current, old: old}
}

// CurrentID is the ID of the key that seals.
func (r *Keyring) CurrentID() string { return r.current.ID }

// PlaceholderPrefix begins every placeholder.
const PlaceholderPrefix = "cove_ph_"

// Placeholder is the placeholder of a team's secret name in one sandbox:
// PlaceholderPrefix and 32 hex digits of a MAC under the current key,
// the same each time it is asked for, telling nothing of the value and
// different in every sandbox.
func (r *Keyring) Placeholder(team, sandbox, name string) string {
	m := hmac.New(sha256.New, r.current.mac)
	m.Write(additional(team, sandbox))
	m.Write(additional("secret", name))
	return PlaceholderPrefix + hex.EncodeToString(m.Sum(nil)[:16])
}

// ErrUnknownKey says a value was sealed under a key the keyring lacks.
var ErrUnknownKey = errors.New("sealed under a key this server was not given")

// ErrOpen says a sealed value did not open: it was altered, or moved to
// another team or name, or the key is wrong.
var ErrOpen = errors.New("sealed value does not open (altered, moved, or a different key)")

// additional binds a sealed value to its team and name.
func additional(team, name string) []byte {
	b := make([]byte, 0, 16+len(team)+len(name))
	b = binary.BigEndian.AppendUint32(b, uint32(len(team)))
	b = append(b, team...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
	return append(b, name...)
}

// Seal encrypts a team's secret value under the current key, with a new
// random nonce.
func (r *Keyring) Seal(team, name string, value []byte) (Sealed, error) {
	k := r.current
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return Sealed{}, err
	}
	return Sealed{KeyID: k.ID, Nonce: nonce, Ciphertext: k.aead.Seal(nil, nonce, value, additional(team, name))}, nil
}

// Open decrypts a team's sealed secret value with the key it names.
func (r *Keyring) Open(team, name string, s Sealed) ([]byte, error) {
	k := r.key(s.KeyID)
	if k == nil {
		return nil, fmt.Errorf("secret %s: key %s: %w", name, s.KeyID, ErrUnknownKey)
	}
	if len(s.Nonce) != k.aead.NonceSize() {
		return nil, fmt.Errorf("secret %s: %w", name, ErrOpen)
	}
	v, err := k.aead.Open(nil, s.Nonce, s.Ciphertext, additional(team, name))
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, ErrOpen)
	}
	return v, nil
}

func (r *Keyring) key(id string) *Key {
	if r.current.ID == id {
		return r.current
	}
	for _, k := range r.old {
		if k.ID == id {
			return k
		}
	}
	return nil
}
