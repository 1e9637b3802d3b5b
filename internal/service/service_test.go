package service

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/internal/fsspread"
)

// TestReadyFile: written whole with the bound addresses, no temporary file
// left beside it, and removed without complaint when already gone.
func TestReadyFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ready.json")
	want := Ready{PID: 42, Listeners: Listeners{"api": "127.0.0.1:41234"}}
	if err := writeReady(p, want); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var got Ready
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ready file (-want +got):\n%s", d)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("dir holds %v, want only ready.json", entries)
	}
	for range 2 {
		if err := removeReady(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("ready file still there: %v", err)
	}
}

// TestStoreURL: without --store the store is today's SQLite file in the
// data directory.
func TestStoreURL(t *testing.T) {
	c := DefaultConfig()
	if got, want := c.StoreURL(), "sqlite:/var/lib/cove/cove.db"; got != want {
		t.Errorf("StoreURL() = %q, want %q", got, want)
	}
	c.Store = "postgres://cove@127.0.0.1/cove"
	if got := c.StoreURL(); got != c.Store {
		t.Errorf("StoreURL() = %q, want %q", got, c.Store)
	}
}

// TestConfigValidate: the defaults validate; empty fields are refused with
// a message that names them.
func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   string // "" validates
	}{
		{"defaults", func(*Config) {}, ""},
		{"zero config", func(c *Config) { *c = Config{} }, "listen address"},
		{"no data dir", func(c *Config) { c.DataDir = "" }, "data dir"},
		{"relative cgroup", func(c *Config) { c.CgroupParent = "cove" }, "cgroup parent"},
		{"zero output max", func(c *Config) { c.OutputMaxBytes = 0 }, "output max bytes"},
		{"no subnet", func(c *Config) { c.Network.Subnet = netip.Prefix{} }, "network subnet"},
		{"no subnet, no network", func(c *Config) { c.Network.Subnet, c.Network.Disabled = netip.Prefix{}, true }, ""},
		{"no table", func(c *Config) { c.Network.Table = "" }, "nftables table"},
		{"ports 0", func(c *Config) { c.Listen, c.Network.GatewayPort, c.Network.DNSPort = "127.0.0.1:0", 0, 0 }, ""},
		{"no connections", func(c *Config) { c.Network.MaxConns = 0 }, "sandbox max connections"},
		{"no dns queries", func(c *Config) { c.Network.MaxDNSQueries = -1 }, "max DNS queries"},
		{"no denied events", func(c *Config) { c.Network.DeniedPerSecond = 0 }, "denied events per second"},
		{"no half-close timeout", func(c *Config) { c.Network.HalfCloseTimeout = 0 }, "half-close timeout"},
		{"limits, no network", func(c *Config) { c.Network.MaxConns, c.Network.Disabled = 0, true }, ""},
		{"no event streams", func(c *Config) { c.HTTP.MaxEventStreamsPerTeam = 0 }, "max event streams per team"},
		{"no watch streams", func(c *Config) { c.HTTP.MaxWatchStreamsPerTeam = 0 }, "max watch streams per team"},
		{"no preview domain", func(c *Config) { c.Preview.Domain = "" }, "preview domain: empty"},
		{"preview scheme", func(c *Config) { c.Preview.Scheme = "ftp" }, "preview scheme"},
		{"sqlite store", func(c *Config) { c.Store = "sqlite:/var/lib/cove/other.db" }, ""},
		{"postgres store", func(c *Config) { c.Store = "postgres://cove@127.0.0.1/cove" }, ""},
		{"unknown store", func(c *Config) { c.Store = "mysql://cove@db/cove" }, "invalid --store"},
		{"store without path", func(c *Config) { c.Store = "sqlite:" }, "invalid --store"},
		{"tls cert only", func(c *Config) { c.TLS.Cert = "/c.pem" }, "--tls-cert and --tls-key: set both"},
		{"tls key only", func(c *Config) { c.TLS.Key = "/k.pem" }, "--tls-cert and --tls-key: set both"},
		{"tls pair", func(c *Config) { c.TLS = TLSFiles{"/c.pem", "/k.pem"} }, ""},
		{"preview tls key only", func(c *Config) { c.Preview.Listen, c.Preview.TLS.Key = "127.0.0.1:0", "/k.pem" }, "--preview-tls-cert and --preview-tls-key: set both"},
		{"preview tls without listener", func(c *Config) { c.Preview.TLS = TLSFiles{"/c.pem", "/k.pem"} }, "--preview-listen"},
		{"public url", func(c *Config) { c.PublicURL = "https://cove.example.com" }, ""},
		{"public url with path", func(c *Config) { c.PublicURL = "https://cove.example.com/api" }, "--public-url"},
		{"public url no scheme", func(c *Config) { c.PublicURL = "cove.example.com" }, "--public-url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.change(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate: %v, want an error about %q", err, tt.want)
			}
		})
	}
}

// TestPreviewTLSImpliesHTTPS: a certificate of the previews' own makes
// their URLs https.
func TestPreviewTLSImpliesHTTPS(t *testing.T) {
	c := DefaultConfig()
	c.Preview.Listen, c.Preview.TLS = "127.0.0.1:0", TLSFiles{"/c.pem", "/k.pem"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Preview.Scheme != "https" {
		t.Fatalf("preview scheme %q, want https", c.Preview.Scheme)
	}
}

// TestPublicURL: the URL links name is --public-url when set, else the
// scheme the TLS files say and the address bound.
func TestPublicURL(t *testing.T) {
	tests := []struct {
		name, public string
		tls          bool
		addr, want   string
	}{
		{"plain", "", false, "127.0.0.1:7070", "http://127.0.0.1:7070"},
		{"tls", "", true, "127.0.0.1:7070", "https://127.0.0.1:7070"},
		{"unspecified", "", true, "0.0.0.0:7070", "https://127.0.0.1:7070"},
		{"behind a proxy", "https://cove.example.com/", false, "127.0.0.1:7070", "https://cove.example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.PublicURL = tt.public
			if tt.tls {
				c.TLS = TLSFiles{"/c.pem", "/k.pem"}
			}
			if got := PublicURL(c, tt.addr); got != tt.want {
				t.Fatalf("PublicURL = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestWarnPlain: a plain listener beyond loopback is warned of, naming
// the listener and the flags that fix it; loopback or TLS is not.
func TestWarnPlain(t *testing.T) {
	tests := []struct {
		addr string
		tls  bool
		warn bool
	}{
		{"127.0.0.1:7070", false, false},
		{"[::1]:7070", false, false},
		{"0.0.0.0:7070", false, true},
		{"192.0.2.1:7070", false, true},
		{"0.0.0.0:7070", true, false},
	}
	for _, tt := range tests {
		var buf strings.Builder
		log := slog.New(slog.NewTextHandler(&buf, nil))
		var tc *tls.Config
		if tt.tls {
			tc = &tls.Config{}
		}
		ap, _ := net.ResolveTCPAddr("tcp", tt.addr)
		warnPlain(log, "api", addrListener{ap}, tc, "--tls-cert and --tls-key")
		got := buf.String()
		if tt.warn != (strings.Contains(got, "level=WARN") && strings.Contains(got, "listener=api") && strings.Contains(got, "--tls-cert")) {
			t.Errorf("%s tls=%v: log %q, want a warning: %v", tt.addr, tt.tls, got, tt.warn)
		}
	}
}

type addrListener struct{ a net.Addr }

func (l addrListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (l addrListener) Close() error              { return nil }
func (l addrListener) Addr() net.Addr            { return l.a }

// TestDataDirSpreadsItsDirectories: the data dir is marked so that the
// directories made in it (sandboxes, output, runc, …) are spread over the
// filesystem, where it takes the mark.
func TestDataDirSpreadsItsDirectories(t *testing.T) {
	c := DefaultConfig()
	c.DataDir = filepath.Join(t.TempDir(), "data")
	c.ImagesDir = filepath.Join(t.TempDir(), "images")
	c.ReadyFile = ""
	if err := prepareDirs(&c, false); err != nil {
		t.Fatal(err)
	}
	if err := fsspread.Subdirs(t.TempDir()); errors.Is(err, fsspread.ErrUnsupported) {
		t.Skipf("the test's filesystem: %v", err)
	}
	if ok, err := fsspread.Spread(c.DataDir); err != nil || !ok {
		t.Errorf("the data dir: spread %v, %v; want marked", ok, err)
	}
}
