package secrets

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testKey(t *testing.T) *Key {
	t.Helper()
	b, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParseKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k := testKey(t)
	r := NewKeyring(k)
	value := []byte("ghp_0123456789abcdef")
	s, err := r.Seal("team_a", "github-token", value)
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyID != k.ID || bytes.Contains(s.Ciphertext, value) {
		t.Fatalf("sealed %+v: want key %s and no plaintext", s, k.ID)
	}
	got, err := r.Open("team_a", "github-token", s)
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	// The same value sealed twice looks different (a nonce per value).
	s2, _ := r.Seal("team_a", "github-token", value)
	if bytes.Equal(s.Nonce, s2.Nonce) || bytes.Equal(s.Ciphertext, s2.Ciphertext) {
		t.Error("two seals of one value share a nonce or ciphertext")
	}

	tamper := func(f func(*Sealed)) Sealed {
		c := Sealed{KeyID: s.KeyID, Nonce: bytes.Clone(s.Nonce), Ciphertext: bytes.Clone(s.Ciphertext)}
		f(&c)
		return c
	}
	tests := []struct {
		name      string
		team, sec string
		sealed    Sealed
		keyring   *Keyring
		wantErr   error
	}{
		{"flipped ciphertext bit", "team_a", "github-token", tamper(func(c *Sealed) { c.Ciphertext[0] ^= 1 }), r, ErrOpen},
		{"flipped tag bit", "team_a", "github-token", tamper(func(c *Sealed) { c.Ciphertext[len(c.Ciphertext)-1] ^= 0x80 }), r, ErrOpen},
		{"flipped nonce bit", "team_a", "github-token", tamper(func(c *Sealed) { c.Nonce[3] ^= 4 }), r, ErrOpen},
		{"short nonce", "team_a", "github-token", tamper(func(c *Sealed) { c.Nonce = c.Nonce[:8] }), r, ErrOpen},
		{"cut ciphertext", "team_a", "github-token", tamper(func(c *Sealed) { c.Ciphertext = c.Ciphertext[:5] }), r, ErrOpen},
		{"moved to another team", "team_b", "github-token", s, r, ErrOpen},
		{"moved to another name", "team_a", "github-token2", s, r, ErrOpen},
		{"team and name boundary", "team_agithub", "-token", s, r, ErrOpen},
		{"wrong key with the right ID", "team_a", "github-token", tamper(func(c *Sealed) {}), NewKeyring(&Key{ID: k.ID, aead: testKey(t).aead}), ErrOpen},
		{"key not given", "team_a", "github-token", s, NewKeyring(testKey(t)), ErrUnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.keyring.Open(tt.team, tt.sec, tt.sealed)
			if !errors.Is(err, tt.wantErr) || got != nil {
				t.Fatalf("Open = %q, %v; want %v", got, err, tt.wantErr)
			}
			if strings.Contains(err.Error(), string(value)) {
				t.Errorf("error %q holds the value", err)
			}
		})
	}
}

func TestKeyringRotation(t *testing.T) {
	old, cur := testKey(t), testKey(t)
	if old.ID == cur.ID {
		t.Fatal("two random keys share an ID")
	}
	s, _ := NewKeyring(old).Seal("t", "n", []byte("value-123"))
	r := NewKeyring(cur, old)
	if r.CurrentID() != cur.ID {
		t.Fatalf("CurrentID = %s", r.CurrentID())
	}
	v, err := r.Open("t", "n", s)
	if err != nil || string(v) != "value-123" {
		t.Fatalf("old key's value: %q, %v", v, err)
	}
	s2, _ := r.Seal("t", "n", v)
	if s2.KeyID != cur.ID {
		t.Fatalf("sealed under %s; want the current key", s2.KeyID)
	}
	if _, err := NewKeyring(old).Open("t", "n", s2); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("old keyring opened a value of the new key: %v", err)
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secrets.key")
	k, made, err := LoadOrCreateKey(path)
	if err != nil || !made {
		t.Fatalf("first LoadOrCreateKey = %v, %v", made, err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("new key file mode %v; want 0600", fi.Mode().Perm())
	}
	k2, made, err := LoadOrCreateKey(path)
	if err != nil || made || k2.ID != k.ID {
		t.Fatalf("second LoadOrCreateKey = %v, %v, same key %v", made, err, k2 != nil && k2.ID == k.ID)
	}

	raw := bytes.Repeat([]byte{7}, KeySize)
	rawPath := filepath.Join(dir, "raw.key")
	os.WriteFile(rawPath, raw, 0o600)
	kr, err := LoadKey(rawPath)
	if err != nil {
		t.Fatalf("raw key: %v", err)
	}
	hexPath := filepath.Join(dir, "hex.key")
	os.WriteFile(hexPath, []byte(strings.Repeat("07", KeySize)+"\n"), 0o400)
	kh, err := LoadKey(hexPath)
	if err != nil || kh.ID != kr.ID {
		t.Fatalf("hex key: %v (same as raw: %v)", err, kh != nil && kh.ID == kr.ID)
	}

	for name, c := range map[string]struct {
		content []byte
		mode    os.FileMode
		want    string
	}{
		"group readable": {[]byte(strings.Repeat("07", KeySize)), 0o640, "chmod 600"},
		"world readable": {[]byte(strings.Repeat("07", KeySize)), 0o604, "chmod 600"},
		"short":          {[]byte("abcdef"), 0o600, "hex digits"},
		"bad hex":        {[]byte(strings.Repeat("zz", KeySize)), 0o600, "hex digits"},
		"empty":          {nil, 0o600, "hex digits"},
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			os.WriteFile(p, c.content, 0o600)
			os.Chmod(p, c.mode)
			if _, err := LoadKey(p); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("LoadKey = %v; want an error saying %q", err, c.want)
			}
		})
	}
	if _, err := LoadKey(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing key file loaded")
	}
}

// TestSealedText: a sealed value written as text reads back and opens;
// what is not one (a value stored before sealing) or an altered one is
// told apart and refused.
func TestSealedText(t *testing.T) {
	r := NewKeyring(testKey(t))
	s, err := r.Seal("team_a", "webhook:whk_1", []byte("whsec_value"))
	if err != nil {
		t.Fatal(err)
	}
	text := s.Text()
	if !IsText(text) || strings.Contains(text, "whsec_value") {
		t.Fatalf("text %q", text)
	}
	back, err := ParseText(text)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := r.Open("team_a", "webhook:whk_1", back); err != nil || string(v) != "whsec_value" {
		t.Fatalf("open: %q %v", v, err)
	}
	if _, err := r.Open("team_a", "webhook:whk_2", back); !errors.Is(err, ErrOpen) {
		t.Errorf("opened as another row's: %v", err)
	}
	for _, bad := range []string{"whsec_value", "", "sealed1:", "sealed1:k:!!:AA==", "sealed1::AA==:AA==", "sealed1:k:AA==:AA==:AA=="} {
		if _, err := ParseText(bad); !errors.Is(err, ErrOpen) {
			t.Errorf("ParseText(%q): %v", bad, err)
		}
	}
	if IsText("whsec_value") {
		t.Error("a clear secret taken for a sealed one")
	}
}
