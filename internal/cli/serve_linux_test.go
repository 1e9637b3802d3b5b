package cli

import (
	"bytes"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/service"
)

// TestServeFlags: every flag of `cove serve` sets its own field of
// service.DefaultConfig() and nothing else.
func TestServeFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want func(*service.Config)
	}{
		{"defaults", nil, func(*service.Config) {}},
		{"max memory alone", []string{"--max-memory-mib", "4096"}, func(c *service.Config) { c.Server.MaxResources.MemoryMiB = 4096 }},
		{"max cpus alone", []string{"--max-cpus", "8"}, func(c *service.Config) { c.Server.MaxResources.CPUs = 8 }},
		{"max disk alone", []string{"--max-disk-mib", "1000"}, func(c *service.Config) { c.Server.MaxResources.DiskMiB = 1000 }},
		{"every port 0", []string{"--listen", "127.0.0.1:0", "--gateway-port", "0", "--dns-port", "0"}, func(c *service.Config) {
			c.Listen = "127.0.0.1:0"
			c.Network.GatewayPort, c.Network.DNSPort = 0, 0
		}},
		{"ready file", []string{"--ready-file", "/run/cove/ready.json"}, func(c *service.Config) { c.ReadyFile = "/run/cove/ready.json" }},
		{"default template", []string{"--default-template", "busybox", "--build-managed=false"}, func(c *service.Config) {
			c.Server.DefaultTemplate = "busybox"
			c.BuildManaged = false
		}},
		{"no console", []string{"--no-console"}, func(c *service.Config) { c.NoConsole = true }},
		{"warm pool off", []string{"--warm-pool", "0"}, func(c *service.Config) { c.Server.WarmPool = 0 }},
		{"subnet", []string{"--subnet", "10.9.0.0/24"}, func(c *service.Config) { c.Network.Subnet = netip.MustParsePrefix("10.9.0.0/24") }},
		{"no network", []string{"--no-network"}, func(c *service.Config) { c.Network.Disabled = true }},
		{"ca certs", []string{"--ca-certs", "/etc/cove/ca.pem"}, func(c *service.Config) { c.CACerts = "/etc/cove/ca.pem" }},
		{"http idle timeout", []string{"--http-idle-timeout", "5s"}, func(c *service.Config) { c.HTTP.IdleTimeout = 5 * time.Second }},
		{"webhooks", []string{"--webhook-allow-private", "--webhook-concurrency", "2", "--webhook-timeout", "3s", "--webhook-backoff", "100ms",
			"--webhook-max-backoff", "1s", "--webhook-retry-for", "1h", "--webhook-poll", "50ms"}, func(c *service.Config) {
			c.Webhooks.AllowPrivate, c.Webhooks.Concurrency, c.Webhooks.Timeout = true, 2, 3*time.Second
			c.Webhooks.Backoff, c.Webhooks.MaxBackoff, c.Webhooks.RetryFor, c.Webhooks.Poll = 100*time.Millisecond, time.Second, time.Hour, 50*time.Millisecond
		}},
		{"metrics listen", []string{"--metrics-listen", "127.0.0.1:9090"}, func(c *service.Config) { c.MetricsListen = "127.0.0.1:9090" }},
		{"dns static", []string{"--dns-static", "DB.internal.=10.0.0.1,10.0.0.2", "--dns-static", "cache=10.0.0.3"}, func(c *service.Config) {
			c.Network.Static = map[string][]netip.Addr{
				"db.internal": {netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")},
				"cache":       {netip.MustParseAddr("10.0.0.3")},
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseServe(t, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			want := service.DefaultConfig()
			want.Network.Static = map[string][]netip.Addr{}
			tt.want(&want)
			if d := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
				cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
				t.Errorf("config (-want +got):\n%s", d)
			}
		})
	}
}

func TestServeFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--subnet", "bogus"},
		{"--dns-static", "noaddress"},
		{"--dns-static", "name=not-an-ip"},
		{"--gateway-port", "70000"},
	} {
		if _, err := parseServe(t, args...); err == nil {
			t.Errorf("%s: accepted", strings.Join(args, " "))
		}
	}
}

func parseServe(t *testing.T, args ...string) (service.Config, error) {
	t.Helper()
	var o serveFlags
	c := &cobra.Command{Use: "serve"}
	o.bind(c)
	if err := c.ParseFlags(args); err != nil {
		return service.Config{}, err
	}
	return o.config()
}

// TestAdminKeyOnlyToATerminal: `cove serve` prints the admin key only when
// its stdout is a terminal; to a pipe (a log collector, a file) it writes
// only where the key is kept.
func TestAdminKeyOnlyToATerminal(t *testing.T) {
	const key = "cove_testkey0123456789"
	cfg := service.DefaultConfig()
	cfg.DataDir = "/srv/cove"
	keyFile := filepath.Join(cfg.DataDir, "admin-api-key")
	announce := func(stdout *os.File) string {
		var stderr bytes.Buffer
		a := &app{env: Env{Stdout: stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}}
		a.announceKey(cfg, "127.0.0.1:7070", key)
		return stderr.String()
	}

	t.Run("pipe", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		stderr := announce(w)
		w.Close()
		stdout, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(stdout)+stderr, key) {
			t.Errorf("the key went to a pipe: stdout %q, stderr %q", stdout, stderr)
		}
		if !strings.Contains(stderr, keyFile) {
			t.Errorf("stderr %q does not say where the key is", stderr)
		}
	})
	t.Run("terminal", func(t *testing.T) {
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Skipf("no pty: %v", err)
		}
		defer ptmx.Close()
		announce(tty)
		tty.Close()
		out, _ := io.ReadAll(ptmx) // EIO once the terminal's side is closed and drained
		if !strings.Contains(string(out), key) {
			t.Errorf("a terminal did not get the key: %q", out)
		}
	})
}
