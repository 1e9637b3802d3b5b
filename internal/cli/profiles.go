package cli

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"

	cove "github.com/cove-dev/cove/sdk/go"
)

// DefaultProfile is the profile used when neither --profile nor
// $COVE_PROFILE names one.
const DefaultProfile = "default"

// Profile is one server and key the CLI can talk to.
type Profile struct {
	URL    string `json:"url,omitempty"`
	APIKey string `json:"api_key,omitempty"`
	// CACert is the PEM of a private CA the server's certificate chains
	// to, stored so later commands trust it too.
	CACert string `json:"ca_cert,omitempty"`
}

// Config is the CLI's config file, $XDG_CONFIG_HOME/cove/config.json
// (~/.config when XDG_CONFIG_HOME is unset). The top-level fields are the
// "default" profile, so a file written by an older `cove serve` (only url
// and api_key) reads unchanged; other profiles live under "profiles".
type Config struct {
	Profile
	Profiles map[string]Profile `json:"profiles,omitempty"`
}

// Get returns the profile called name.
func (c Config) Get(name string) (Profile, bool) {
	if name == DefaultProfile {
		return c.Profile, c.Profile != (Profile{})
	}
	p, ok := c.Profiles[name]
	return p, ok
}

// Set stores p as the profile called name.
func (c *Config) Set(name string, p Profile) {
	if name == DefaultProfile {
		c.Profile = p
		return
	}
	if c.Profiles == nil {
		c.Profiles = map[string]Profile{}
	}
	c.Profiles[name] = p
}

// Delete removes the profile called name and says whether it was there.
func (c *Config) Delete(name string) bool {
	_, ok := c.Get(name)
	if name == DefaultProfile {
		c.Profile = Profile{}
	} else {
		delete(c.Profiles, name)
	}
	return ok
}

// Names lists the profiles the config holds, sorted.
func (c Config) Names() []string {
	var out []string
	if c.Profile != (Profile{}) {
		out = append(out, DefaultProfile)
	}
	for n := range c.Profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ConfigPath is where the CLI config lives: $XDG_CONFIG_HOME/cove, else
// $HOME/.config/cove. It is "" when neither is set.
func ConfigPath(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "cove", "config.json")
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".config", "cove", "config.json")
	}
	return ""
}

// ReadConfig reads the CLI config file; a missing file is an empty config.
func ReadConfig(getenv func(string) string) (Config, error) {
	var cfg Config
	p := ConfigPath(getenv)
	if p == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("read %s: %w", p, err)
	}
	return cfg, nil
}

// WriteConfig replaces the CLI config file atomically: its directory 0700,
// the file 0600.
func WriteConfig(getenv func(string) string, c Config) error {
	p := ConfigPath(getenv)
	if p == "" {
		return errors.New("neither XDG_CONFIG_HOME nor HOME is set: nowhere to keep the CLI config")
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".config-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

// SaveProfile stores one profile, keeping the others.
func SaveProfile(getenv func(string) string, name string, p Profile) error {
	cfg, err := ReadConfig(getenv)
	if err != nil {
		return err
	}
	cfg.Set(name, p)
	return WriteConfig(getenv, cfg)
}

// profileName is --profile, $COVE_PROFILE, or "default".
func (a *app) profileName() string {
	return firstNonEmpty(a.profile, a.env.Getenv("COVE_PROFILE"), DefaultProfile)
}

// current is the profile the command runs with, overridden by
// $COVE_URL/$COVE_API_KEY and then --url/--api-key. A profile named
// explicitly must exist.
func (a *app) current() (Profile, error) {
	cfg, err := ReadConfig(a.env.Getenv)
	if err != nil {
		return Profile{}, err
	}
	name := a.profileName()
	p, ok := cfg.Get(name)
	if !ok && name != DefaultProfile {
		return Profile{}, fmt.Errorf("no profile %q in %s (run `cove login --profile %s URL`)", name, ConfigPath(a.env.Getenv), name)
	}
	p.URL = firstNonEmpty(a.url, a.env.Getenv("COVE_URL"), p.URL, DefaultURL)
	p.APIKey = firstNonEmpty(a.key, a.env.Getenv("COVE_API_KEY"), p.APIKey)
	return p, nil
}

func (a *app) client() (*cove.Client, error) {
	p, err := a.current()
	if err != nil {
		return nil, err
	}
	if p.APIKey == "" {
		return nil, errors.New("no API key: run `cove login`, or set COVE_API_KEY")
	}
	return a.clientFor(p, "")
}

// clientFor builds a client for p, trusting p.CACert (or the PEM in
// caFile) besides the system roots and $SSL_CERT_FILE.
func (a *app) clientFor(p Profile, caFile string) (*cove.Client, error) {
	opts := []cove.Option{cove.WithBaseURL(p.URL), cove.WithAPIKey(p.APIKey)}
	pemData := []byte(p.CACert)
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		pemData = b
	}
	if len(pemData) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pemData) {
			return nil, errors.New("the CA certificate holds no PEM certificate")
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		opts = append(opts, cove.WithHTTPClient(&http.Client{Transport: tr}))
	}
	return cove.NewClient(opts...), nil
}

// serverURL is the server the CLI talks to: --url, $COVE_URL, the
// profile, or DefaultURL.
func (a *app) serverURL() (string, error) {
	p, err := a.current()
	if err != nil {
		return "", err
	}
	return p.URL, nil
}
