package service

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/node/gpu"
	"github.com/cove-dev/cove/internal/store/open"
	"github.com/cove-dev/cove/internal/webhooks"
)

// MinCloneBytes is the smallest MaxCloneBytes: the scratch filesystem of
// a clone needs room for its own bookkeeping.
const MinCloneBytes = 16 << 20

// Config is the configuration of `cove serve`. DefaultConfig holds the
// default of every field; the flags of `cove serve` start from it.
type Config struct {
	// Listen is the API's TCP address; port 0 takes a free port, reported
	// in the ready file and GET /healthz. Default 127.0.0.1:7070.
	Listen string
	// DataDir holds the database, sandbox state and recorded output.
	// Default /var/lib/cove.
	DataDir string
	// Store is the control plane's database: sqlite:PATH (one process),
	// or postgres://USER@HOST/DATABASE, which replicas of `cove control`
	// share. "" is sqlite:<DataDir>/cove.db.
	Store string
	// ImagesDir holds the images; "" is <DataDir>/images.
	ImagesDir string
	// BuildManaged builds the managed image when it is missing, in the
	// background while the service already serves. Default true.
	BuildManaged bool
	// ManagedBuilder builds the managed image: "debootstrap" (default), or
	// "busybox", a small stand-in for tests of the build's life that
	// waits while <ImagesDir>/.managed.hold exists.
	ManagedBuilder string
	// ImageMaxMiB bounds an imported image: its uploaded archive, and its
	// unpacked files four times that. Default 8192.
	ImageMaxMiB int64
	// AgentPath is the cove-agent binary; "" is cove-agent beside the
	// running executable.
	AgentPath string
	// RuncPath is the OCI runtime. Default "runc" from PATH.
	RuncPath string
	// CgroupParent holds every sandbox's cgroup. Default "/cove".
	CgroupParent string
	// CDISpecDirs are where the node reads the Container Device
	// Interface specs of its GPUs (NVIDIA's `nvidia-ctk cdi generate`
	// writes them). Default /etc/cdi and /var/run/cdi.
	CDISpecDirs []string
	// GPUKind is the kind of CDI device counted as the node's GPUs
	// (vendor/class) and advertised as their type. Default nvidia.com/gpu.
	GPUKind string
	// OutputMaxBytes caps one command's recorded output, its index
	// included. Default 4 GiB.
	OutputMaxBytes int64
	// DiskOvercommit admits a sandbox while the disks the node's sandboxes
	// may still grow into fit in this many times the data disk's free
	// space, less DiskReserveMiB. Default 1 (no overcommit); 0 admits all.
	DiskOvercommit float64
	// DiskReserveMiB of the data disk are kept for recorded output, the
	// database and saves. Default 1024.
	DiskReserveMiB int64
	// SandboxOutputMaxBytes caps the recorded output of all of one
	// sandbox's commands together, indexes included. Default 8 GiB.
	SandboxOutputMaxBytes int64
	// MaxCloneBytes caps one git clone: the node's disk it may take while
	// it runs (a scratch filesystem of this size, admitted like a
	// sandbox's disk) and the bytes of its tree. Default 10 GiB.
	MaxCloneBytes int64
	// ReadyFile is written (atomically) once the service serves, with the
	// addresses it bound, and removed on a graceful stop; "" is
	// <DataDir>/ready.json.
	ReadyFile string
	// NoConsole turns off the web console served at /.
	NoConsole bool
	// CACerts are the CA certificates sandboxes trust besides their
	// image's: a PEM file, or a directory of *.crt PEM files; NoCACerts
	// for none. They are added to the system bundle of every image that
	// has one. Default DefaultCACerts (none when it does not exist).
	CACerts string
	// SecretsKeyFile holds the key that seals teams' secrets (64 hex
	// digits or 32 raw bytes, mode 0600); "" is <DataDir>/secrets.key,
	// made at the first start. A file named here must exist.
	SecretsKeyFile string
	// SecretsOldKeyFiles are keys of a rotation: every secret sealed under
	// one of them is sealed again under SecretsKeyFile at start, after
	// which they are no longer needed.
	SecretsOldKeyFiles []string
	// HTTP bounds the API's connections.
	HTTP HTTPConfig
	// TLS, when its files are set, serves the API and console over TLS
	// (HTTP/2 offered), the files reloaded when they change.
	TLS TLSFiles
	// PublicURL is the API's and console's own URL as clients reach it
	// (behind a TLS-terminating proxy too), used in the links the server
	// makes; "" derives it from the listener bound.
	PublicURL string
	// Server is the control plane's own configuration (default template,
	// resources, limits); its Templates are filled from ImagesDir.
	Server lifecycle.Config
	// Network is the node's fence, resolver and gateway.
	Network NetworkConfig
	// Webhooks configures the delivery of events to webhooks; its
	// AllowPrivate also decides which URLs a webhook may be created with.
	Webhooks webhooks.Config
	// MetricsListen, when set, is an address that serves GET /metrics
	// without a key (for a scraper on a private network); the API serves
	// it to admin keys either way. Default "" (none).
	MetricsListen string
	// Preview is where sandboxes' published ports are served.
	Preview PreviewConfig
	// E2B is where E2B's protocol is served; default nowhere.
	E2B E2BConfig
	// Saves is where the files of sleeping sandboxes are kept: a
	// directory ("" is <DataDir>/saves) or s3://BUCKET/PREFIX?endpoint=URL.
	// A fleet's control plane and nodes share one S3 store.
	Saves string
	// SavesCredentials is a file of S3 credentials; "" reads the AWS_*
	// environment variables.
	SavesCredentials string
	// LeaseTTL is how long the leader's lease lasts unrenewed: the
	// replicas sharing a store take over a leader that died within about
	// this long. It is renewed every third of it. Default 6 seconds.
	LeaseTTL time.Duration
}

// PreviewConfig says where previews are served.
type PreviewConfig struct {
	// Domain: previews are at <port>-<sandbox id>.<Domain>, host[:port];
	// without a port, URLs name the port of the listener that serves
	// them. Required: every preview is an origin of its own, never the
	// API's (the console's). Default "localhost" (browsers resolve its
	// subdomains to loopback).
	Domain string
	// Listen is a listener of previews' own (Host routing only); "" lets
	// the API's listener route them by Host.
	Listen string
	// Scheme of preview URLs. Default http; a TLS certificate of the
	// previews' own makes it https.
	Scheme string
	// TLS, when its files are set, serves the preview listener over TLS
	// (a wildcard certificate for the domain); it needs Listen.
	TLS TLSFiles
}

// TLSFiles are a PEM certificate (chain) and its key; both or neither.
type TLSFiles struct {
	Cert, Key string
}

// On says whether TLS is asked for.
func (t TLSFiles) On() bool { return t.Cert != "" || t.Key != "" }

// check names both flags when only one of them is set.
func (t TLSFiles) check(certFlag, keyFlag string) error {
	if (t.Cert == "") != (t.Key == "") {
		return fmt.Errorf("%s and %s: set both or neither", certFlag, keyFlag)
	}
	return nil
}

// HTTPConfig bounds the API's connections. There is no deadline on a
// whole request or response (http.Server's ReadTimeout and WriteTimeout
// stay 0): uploads and downloads of large files, attached terminals and
// followed output and events last as long as they move, and a deadline
// on the whole would cut them. A peer that vanishes is found by TCP
// keep-alive (on by default for accepted connections); a slow body only
// holds its own authenticated request.
type HTTPConfig struct {
	// IdleTimeout closes a kept-alive connection that sends no new request
	// for this long. Default 2 minutes.
	IdleTimeout time.Duration
	// ReadHeaderTimeout is how long a client has to send a request's
	// headers. Default 10 seconds.
	ReadHeaderTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (larger: 431). Default
	// 64 KiB.
	MaxHeaderBytes int
	// UploadIdleTimeout cuts the body of an upload (an image, an asset,
	// a source upload) that sends nothing for this long: the upload
	// fails and nothing of it is kept. Default 60 seconds.
	UploadIdleTimeout time.Duration
	// MaxEventStreamsPerTeam is how many GET /v1/events/stream one team
	// may hold open at once; more are refused with 429 until one closes.
	// Default 16.
	MaxEventStreamsPerTeam int
	// MaxWatchStreamsPerTeam is how many file watch streams (GET
	// /v1/sandboxes/{ref}/files/watch) one team may hold open at once
	// over all its sandboxes (each sandbox at most 32); more are refused
	// with 429 until one closes. Default 64.
	MaxWatchStreamsPerTeam int
}

// DefaultConfig is the configuration of `cove serve` with every default set.
func DefaultConfig() Config {
	return Config{
		Listen:                "127.0.0.1:7070",
		DataDir:               "/var/lib/cove",
		BuildManaged:          true,
		ManagedBuilder:        "debootstrap",
		ImageMaxMiB:           8192,
		RuncPath:              "runc",
		CgroupParent:          "/cove",
		CDISpecDirs:           gpu.DefaultSpecDirs,
		GPUKind:               gpu.DefaultKind,
		OutputMaxBytes:        4 << 30,
		SandboxOutputMaxBytes: 8 << 30,
		DiskOvercommit:        1,
		DiskReserveMiB:        1024,
		MaxCloneBytes:         10 << 30,
		CACerts:               DefaultCACerts,
		HTTP: HTTPConfig{
			IdleTimeout:       2 * time.Minute,
			UploadIdleTimeout: time.Minute,
			ReadHeaderTimeout: 10 * time.Second,
			MaxHeaderBytes:    64 << 10,
			// A console tab and an agent or two each hold a stream;
			// sixteen leaves room for many without letting one team
			// hold thousands of connections and goroutines.
			MaxEventStreamsPerTeam: 16,
			// Two sandboxes' full share of watches.
			MaxWatchStreamsPerTeam: 64,
		},
		Server:   lifecycle.DefaultConfig(),
		Webhooks: webhooks.DefaultConfig(),
		Preview:  PreviewConfig{Domain: "localhost", Scheme: "http"},
		LeaseTTL: 6 * time.Second,
		Network: NetworkConfig{
			Subnet:      netip.MustParsePrefix("10.88.0.0/16"),
			Table:       "cove",
			GatewayPort: 15001,
			DNSPort:     15353,
			Upstream:    "auto",
			// A build opens tens of connections at once and a resolver's
			// client two queries a lookup; a sandbox that opens thousands
			// is refused past these, and others on the node are not slowed.
			MaxConns:        512,
			MaxDNSQueries:   128,
			DeniedPerSecond: 10,
			// Long enough for a server that answers after the client has
			// sent its last byte; short enough that a silent one does not
			// hold a sandbox's connection slots for long.
			HalfCloseTimeout: time.Minute,
		},
	}
}

// Validate reports a configuration that cannot work. The control plane's
// part is checked by lifecycle.New, once the templates are known.
func (c *Config) Validate() error {
	if err := c.TLS.check("--tls-cert", "--tls-key"); err != nil {
		return err
	}
	if err := c.Preview.TLS.check("--preview-tls-cert", "--preview-tls-key"); err != nil {
		return err
	}
	if c.Preview.TLS.On() && c.Preview.Listen == "" {
		return errors.New("--preview-tls-cert: previews then need a listener of their own (--preview-listen)")
	}
	if c.Preview.TLS.On() {
		c.Preview.Scheme = "https"
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return fmt.Errorf("--public-url %q: want http(s)://HOST[:PORT] (no path)", c.PublicURL)
		}
		c.PublicURL = u.Scheme + "://" + u.Host
	}
	switch {
	case c.Listen == "":
		return errors.New("listen address: empty (use host:port; port 0 takes a free one)")
	case c.DataDir == "":
		return errors.New("data dir: empty")
	case c.LeaseTTL < 300*time.Millisecond:
		return fmt.Errorf("--lease-ttl %v: want at least 300ms", c.LeaseTTL)
	case c.RuncPath == "":
		return errors.New("runc path: empty")
	case !path.IsAbs(c.CgroupParent):
		return fmt.Errorf("cgroup parent %q: want an absolute cgroup path such as /cove", c.CgroupParent)
	case c.OutputMaxBytes <= 0:
		return fmt.Errorf("output max bytes %d: want at least 1", c.OutputMaxBytes)
	case c.DiskOvercommit < 0 || c.DiskReserveMiB < 0:
		return fmt.Errorf("disk overcommit %v and reserve %d MiB: want neither below 0", c.DiskOvercommit, c.DiskReserveMiB)
	case c.SandboxOutputMaxBytes < c.OutputMaxBytes:
		return fmt.Errorf("sandbox output max bytes %d: want at least the output max bytes of one command (%d)", c.SandboxOutputMaxBytes, c.OutputMaxBytes)
	case c.MaxCloneBytes < MinCloneBytes:
		return fmt.Errorf("max clone bytes %d: want at least %d (16 MiB)", c.MaxCloneBytes, MinCloneBytes)
	case c.HTTP.IdleTimeout <= 0 || c.HTTP.ReadHeaderTimeout <= 0:
		return fmt.Errorf("http timeouts (idle %v, read header %v): want both above 0", c.HTTP.IdleTimeout, c.HTTP.ReadHeaderTimeout)
	case c.HTTP.UploadIdleTimeout <= 0:
		return fmt.Errorf("upload idle timeout %v: want above 0", c.HTTP.UploadIdleTimeout)
	case c.HTTP.MaxHeaderBytes < 4<<10:
		return fmt.Errorf("http max header bytes %d: want at least 4096", c.HTTP.MaxHeaderBytes)
	case c.HTTP.MaxEventStreamsPerTeam < 1:
		return fmt.Errorf("max event streams per team %d: want at least 1", c.HTTP.MaxEventStreamsPerTeam)
	case c.HTTP.MaxWatchStreamsPerTeam < 1:
		return fmt.Errorf("max watch streams per team %d: want at least 1", c.HTTP.MaxWatchStreamsPerTeam)
	case strings.Trim(c.Preview.Domain, ". ") == "":
		return errors.New("preview domain: empty; previews are served only on hosts of their own (<port>-<sandbox id>.<domain>), never on the API's: keep the default localhost or name a domain whose subdomains reach this server")
	case c.Preview.Scheme != "http" && c.Preview.Scheme != "https":
		return fmt.Errorf("preview scheme %q: use http or https", c.Preview.Scheme)
	}
	if c.Store != "" {
		if _, _, err := open.Kind(c.Store); err != nil {
			return err
		}
	}
	if err := c.Webhooks.Validate(); err != nil {
		return err
	}
	if err := c.E2B.Validate(); err != nil {
		return err
	}
	if n := c.Network; !n.Disabled {
		switch {
		case !n.Subnet.IsValid():
			return errors.New("network subnet: not set (e.g. 10.88.0.0/16)")
		case n.Table == "":
			return errors.New("network nftables table: empty")
		case n.MaxConns < 1 || n.MaxDNSQueries < 1:
			return fmt.Errorf("sandbox max connections %d and max DNS queries %d: want both at least 1", n.MaxConns, n.MaxDNSQueries)
		case !(n.DeniedPerSecond > 0):
			return fmt.Errorf("sandbox denied events per second %v: want more than 0", n.DeniedPerSecond)
		case n.HalfCloseTimeout <= 0:
			return fmt.Errorf("gateway half-close timeout %v: want above 0", n.HalfCloseTimeout)
		}
	}
	return nil
}

// StoreURL is the store's URL: Store, or the SQLite file in the data
// directory.
func (c *Config) StoreURL() string {
	if c.Store != "" {
		return c.Store
	}
	return "sqlite:" + filepath.Join(c.DataDir, "cove.db")
}

// resolve makes the paths absolute and fills those derived from others:
// the images dir, the agent binary and the ready file.
func (c *Config) resolve() error {
	var err error
	if c.DataDir, err = filepath.Abs(c.DataDir); err != nil {
		return err
	}
	if c.ImagesDir == "" {
		c.ImagesDir = filepath.Join(c.DataDir, "images")
	}
	if c.ImagesDir, err = filepath.Abs(c.ImagesDir); err != nil {
		return err
	}
	if c.ReadyFile == "" {
		c.ReadyFile = filepath.Join(c.DataDir, "ready.json")
	}
	if c.ReadyFile, err = filepath.Abs(c.ReadyFile); err != nil {
		return err
	}
	if c.AgentPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own executable: %w", err)
		}
		c.AgentPath = filepath.Join(filepath.Dir(exe), "cove-agent")
	}
	return nil
}
