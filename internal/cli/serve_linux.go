package cli

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/service"
)

// serverCmds are the commands that run the service; they need Linux.
func (a *app) serverCmds() []*cobra.Command {
	return []*cobra.Command{a.serveCmd(), a.controlCmd(), a.nodeCmd(), a.adminCmd()}
}

func (a *app) serveCmd() *cobra.Command {
	var o serveFlags
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the whole cove service on this host",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := a.logger(o.logLevel)
			if err != nil {
				return err
			}
			cfg, err := o.config()
			if err != nil {
				return err
			}
			return service.Run(cmd.Context(), cfg, log, a.env.Stderr, func(st service.Started) {
				if st.AdminKey != "" {
					a.announceKey(cfg, st.Listeners["api"], st.AdminKey)
				}
			})
		},
	}
	o.bind(c)
	return c
}

// serveFlags are the flags of `cove serve`: each sets one field of a
// config that starts as service.DefaultConfig().
type serveFlags struct {
	cfg      service.Config
	logLevel string
	static   []string
	prices   string
	// defaultAdmission is the comma-separated flags of new teams.
	defaultAdmission string
	// e2bTemplates are --e2b-template NAME=TEMPLATE flags.
	e2bTemplates []string
}

// bind binds every flag of `cove serve`: the process's own, the node's
// and the control plane's.
func (o *serveFlags) bind(c *cobra.Command) {
	o.bindProcess(c)
	o.bindNode(c)
	o.bindPlane(c)
}

// bindProcess binds the flags every server process has: where it listens
// and keeps its data, and its log.
func (o *serveFlags) bindProcess(c *cobra.Command) {
	def := service.DefaultConfig()
	o.cfg = def
	f := c.Flags()
	f.StringVar(&o.cfg.Listen, "listen", def.Listen, "API address (port 0: a free port, reported in the ready file and /healthz)")
	f.StringVar(&o.cfg.DataDir, "data-dir", def.DataDir, "data directory")
	f.StringVar(&o.cfg.ReadyFile, "ready-file", def.ReadyFile, "written once serving with the bound addresses as JSON, removed on a graceful stop (default <data-dir>/ready.json)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.cfg.ImagesDir, "images-dir", def.ImagesDir, "images directory (default <data-dir>/images)")
	f.StringVar(&o.cfg.Saves, "saves", def.Saves, "where saves of sleeping sandboxes are kept: a directory (default <data-dir>/saves) or s3://BUCKET/PREFIX?endpoint=URL (path-style; credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or --saves-credentials)")
	f.StringVar(&o.cfg.SavesCredentials, "saves-credentials", def.SavesCredentials, "a file of S3 credentials for --saves (AWS shared-credentials format, profile default)")
}

// bindNode binds the flags of the node side: images, runtime, disk
// admission, recorded output and the network's fence, resolver and
// gateway.
func (o *serveFlags) bindNode(c *cobra.Command) {
	def := service.DefaultConfig()
	f := c.Flags()
	f.BoolVar(&o.cfg.BuildManaged, "build-managed", def.BuildManaged, "build the managed image if it is missing (in the background: the API serves at once)")
	f.StringVar(&o.cfg.ManagedBuilder, "managed-builder", def.ManagedBuilder, "builder of the managed image: debootstrap, or busybox (tests: a stand-in that waits while <images-dir>/.managed.hold exists)")
	f.MarkHidden("managed-builder")
	f.StringVar(&o.cfg.AgentPath, "agent", def.AgentPath, "cove-agent binary (default: beside this executable)")
	f.StringVar(&o.cfg.RuncPath, "runc", def.RuncPath, "OCI runtime binary")
	f.StringVar(&o.cfg.CgroupParent, "cgroup-parent", def.CgroupParent, "cgroup holding every sandbox's cgroup")
	f.StringSliceVar(&o.cfg.CDISpecDirs, "cdi-spec-dirs", def.CDISpecDirs, "directories of the Container Device Interface specs that describe this node's GPUs (nvidia-ctk cdi generate writes them)")
	f.StringVar(&o.cfg.GPUKind, "gpu-kind", def.GPUKind, "kind of CDI device (vendor/class) counted as this node's GPUs and advertised as their type")
	f.Int64Var(&o.cfg.OutputMaxBytes, "output-max-bytes", def.OutputMaxBytes, "recorded output kept per command")
	f.Float64Var(&o.cfg.DiskOvercommit, "disk-overcommit", def.DiskOvercommit, "admit sandboxes while their disks fit in this many times the data disk's free space (0: admit all)")
	f.Int64Var(&o.cfg.DiskReserveMiB, "disk-reserve-mib", def.DiskReserveMiB, "data disk space kept for output, the database and saves")
	f.Int64Var(&o.cfg.MaxCloneBytes, "max-clone-bytes", def.MaxCloneBytes, "the most a git source's clone may take on the node's disk, and the bytes of its tree; a larger clone fails the sandbox")
	f.Int64Var(&o.cfg.SandboxOutputMaxBytes, "sandbox-output-max-bytes", def.SandboxOutputMaxBytes, "recorded output kept per sandbox, all its commands together")
	f.BoolVar(&o.cfg.Network.Disabled, "no-network", def.Network.Disabled, "no fence, resolver or gateway: sandboxes get loopback only")
	f.TextVar(&o.cfg.Network.Subnet, "subnet", def.Network.Subnet, "subnet carved into one /30 per sandbox")
	f.StringVar(&o.cfg.Network.Table, "nft-table", def.Network.Table, "nftables table (inet) of the fence")
	f.Uint16Var(&o.cfg.Network.GatewayPort, "gateway-port", def.Network.GatewayPort, "port of the egress gateway (0: a free port)")
	f.Uint16Var(&o.cfg.Network.DNSPort, "dns-port", def.Network.DNSPort, "port of the sandboxes' resolver, UDP and TCP (0: a free port)")
	f.StringArrayVar(&o.static, "dns-static", nil, "a name the resolver answers itself, NAME=IP[,IP] (repeatable)")
	f.StringVar(&o.cfg.Network.Upstream, "dns-upstream", def.Network.Upstream, "upstream resolver host:port; auto reads /etc/resolv.conf; none forwards nothing")
	f.IntVar(&o.cfg.Network.MaxConns, "sandbox-max-connections", def.Network.MaxConns, "connections one sandbox may have open through the egress gateway at once (more are reset)")
	f.IntVar(&o.cfg.Network.MaxDNSQueries, "sandbox-max-dns-queries", def.Network.MaxDNSQueries, "DNS queries one sandbox may have in flight at once, TCP connections to the resolver included (more get REFUSED)")
	f.DurationVar(&o.cfg.Network.HalfCloseTimeout, "gateway-half-close-timeout", def.Network.HalfCloseTimeout, "close a relayed connection once one side has ended and the other has sent nothing for this long")
	f.Float64Var(&o.cfg.Network.DeniedPerSecond, "sandbox-denied-events-per-second", def.Network.DeniedPerSecond, "network.denied events per sandbox per second; the next event counts those held back")
	f.StringVar(&o.cfg.CACerts, "ca-certs", def.CACerts, "CA certificates sandboxes trust besides their image's: a PEM file or a directory of *.crt files (none: no others)")
}

// bindPlane binds the flags of the control plane: templates and limits,
// teams' quotas, metering, webhooks, previews and the API's bounds.
func (o *serveFlags) bindPlane(c *cobra.Command) {
	def := service.DefaultConfig()
	f := c.Flags()
	f.StringVar(&o.cfg.Store, "store", def.Store, "the control plane's database: sqlite:PATH, or postgres://USER@HOST/DATABASE that replicas of cove control share (password from PGPASSWORD or ~/.pgpass rather than the URL) (default sqlite:<data-dir>/cove.db)")
	f.Int64Var(&o.cfg.ImageMaxMiB, "image-max-mib", def.ImageMaxMiB, "largest image archive `cove images import` takes, in MiB (its unpacked files may take 4 times that)")
	f.StringVar(&o.cfg.Server.DefaultTemplate, "default-template", def.Server.DefaultTemplate, "template of sandboxes that name none")
	f.BoolVar(&o.cfg.NoConsole, "no-console", def.NoConsole, "do not serve the web console at /")
	f.Float64Var(&o.cfg.Server.MaxResources.CPUs, "max-cpus", def.Server.MaxResources.CPUs, "most CPUs one sandbox may reserve")
	f.Int64Var(&o.cfg.Server.MaxResources.MemoryMiB, "max-memory-mib", def.Server.MaxResources.MemoryMiB, "most memory one sandbox may reserve")
	f.Int64Var(&o.cfg.Server.MaxResources.DiskMiB, "max-disk-mib", def.Server.MaxResources.DiskMiB, "most disk one sandbox may reserve")
	f.Int64Var(&o.cfg.Server.PidsLimit, "pids-limit", def.Server.PidsLimit, "most processes and threads in one sandbox")
	f.IntVar(&o.cfg.Server.WarmPool, "warm-pool", def.Server.WarmPool, "ready sandboxes of the default template kept to hand out at once (0: none)")
	f.DurationVar(&o.cfg.Server.EventRetention, "event-retention", def.Server.EventRetention, "how long events, and network observations after they were last seen, are kept (e.g. 720h)")
	f.DurationVar(&o.cfg.Server.UploadTimeout, "upload-timeout", def.Server.UploadTimeout, "how long a sandbox created with source upload waits for its archive")
	f.Int64Var(&o.cfg.Server.MaxSourceBytes, "max-source-bytes", def.Server.MaxSourceBytes, "the largest source upload or asset, in bytes as sent")
	f.Int64Var(&o.cfg.Server.MaxTeamAssetBytes, "max-team-asset-bytes", def.Server.MaxTeamAssetBytes, "the bytes of assets one team may keep")
	f.IntVar(&o.cfg.Server.MaxFork, "max-fork", def.Server.MaxFork, "the most sandboxes one fork makes")
	f.IntVar(&o.cfg.Server.MaxSnapshotsPerTeam, "max-snapshots-per-team", def.Server.MaxSnapshotsPerTeam, "the snapshots one team may keep")
	f.Int64Var(&o.cfg.Server.MaxSnapshotBytesPerTeam, "max-snapshot-bytes-per-team", def.Server.MaxSnapshotBytesPerTeam, "the stored bytes of snapshots one team may keep")
	f.Int64Var(&o.cfg.Server.MaxVolumeMiB, "max-volume-mib", def.Server.MaxVolumeMiB, "the largest volume, in MiB (the smallest is 16)")
	f.IntVar(&o.cfg.Server.MaxVolumesPerTeam, "max-volumes-per-team", def.Server.MaxVolumesPerTeam, "the volumes one team may keep")
	f.Int64Var(&o.cfg.Server.MaxVolumeMiBPerTeam, "max-volume-mib-per-team", def.Server.MaxVolumeMiBPerTeam, "the MiB of volumes one team may keep, all sizes together")
	f.DurationVar(&o.cfg.Server.VolumeUsageInterval, "volume-usage-interval", def.Server.VolumeUsageInterval, "how often the volumes of running sandboxes are measured (used_bytes, volume.full)")
	f.Int64Var(&o.cfg.Server.MaxImageBytesPerTeam, "max-image-bytes-per-team", def.Server.MaxImageBytesPerTeam, "the bytes of imported images (unpacked) and image uploads one team may keep")
	f.IntVar(&o.cfg.Server.MaxUploadsPerTeam, "max-uploads-per-team", def.Server.MaxUploadsPerTeam, "uploads (images, assets, source uploads) one team may have open at once (more answer 429)")
	f.DurationVar(&o.cfg.HTTP.UploadIdleTimeout, "upload-idle-timeout", def.HTTP.UploadIdleTimeout, "cut an upload's body that sends nothing this long (the upload fails, nothing is kept)")
	f.IntVar(&o.cfg.Server.SetupCacheEntries, "setup-cache-entries", def.Server.SetupCacheEntries, "setup cache entries one team keeps (least recently used evicted first)")
	f.Int64Var(&o.cfg.Server.SetupCacheBytes, "setup-cache-bytes", def.Server.SetupCacheBytes, "bytes of setup cache one team keeps (least recently used evicted first)")
	f.StringVar(&o.cfg.SecretsKeyFile, "secrets-key-file", def.SecretsKeyFile, "key sealing teams' secrets, 64 hex digits or 32 bytes, mode 0600 (default <data-dir>/secrets.key, made at the first start)")
	f.StringArrayVar(&o.cfg.SecretsOldKeyFiles, "secrets-old-key-file", nil, "an earlier secrets key: secrets sealed under it are sealed again under --secrets-key-file at start (repeatable)")
	f.IntVar(&o.cfg.HTTP.MaxWatchStreamsPerTeam, "max-watch-streams-per-team", def.HTTP.MaxWatchStreamsPerTeam, "file watch streams (GET /v1/sandboxes/{ref}/files/watch) one team may hold open at once over all its sandboxes (each at most 32); more get 429")
	f.IntVar(&o.cfg.HTTP.MaxEventStreamsPerTeam, "max-event-streams-per-team", def.HTTP.MaxEventStreamsPerTeam, "event streams (GET /v1/events/stream) one team may hold open at once; more get 429")
	f.DurationVar(&o.cfg.HTTP.IdleTimeout, "http-idle-timeout", def.HTTP.IdleTimeout, "close API connections kept alive without a request this long")
	f.IntVar(&o.cfg.Server.MaxQueuedWorkloadsPerTeam, "max-queued-workloads-per-team", def.Server.MaxQueuedWorkloadsPerTeam, "workloads one team may have queued at once (more are refused with 429)")
	f.DurationVar(&o.cfg.Server.MetricsInterval, "metrics-interval", def.Server.MetricsInterval, "how often running sandboxes (setups included) are sampled, they and placed workloads charged, and spend limits checked")
	f.DurationVar(&o.cfg.Server.MetricsRawRetention, "metrics-raw-retention", def.Server.MetricsRawRetention, "how long raw samples are kept")
	f.DurationVar(&o.cfg.Server.MetricsRollupRetention, "metrics-rollup-retention", def.Server.MetricsRollupRetention, "how long 1-minute rollups of samples are kept")
	f.StringVar(&o.prices, "prices", "", `price table, JSON: {"vcpu_second_usd","memory_gib_second_usd","storage_gib_hour_usd","egress_gb_usd","gpu_second_usd"} (fields left out keep the defaults)`)
	f.BoolVar(&o.cfg.Webhooks.AllowPrivate, "webhook-allow-private", def.Webhooks.AllowPrivate, "let webhooks reach private, loopback and other non-public addresses and the node's own (cloud metadata never)")
	f.IntVar(&o.cfg.Webhooks.Concurrency, "webhook-concurrency", def.Webhooks.Concurrency, "webhook deliveries in flight at once (one per webhook)")
	f.IntVar(&o.cfg.Webhooks.TeamConcurrency, "webhook-team-concurrency", def.Webhooks.TeamConcurrency, "webhook deliveries of one team in flight at once (free slots go round-robin across teams)")
	f.IntVar(&o.cfg.Webhooks.Backlog, "webhook-backlog", def.Webhooks.Backlog, "pending webhook deliveries a team may have; past it the oldest fail (backlog_full) and a webhook.dropped event says how many")
	f.DurationVar(&o.cfg.Webhooks.Timeout, "webhook-timeout", def.Webhooks.Timeout, "bound on one webhook delivery attempt")
	f.DurationVar(&o.cfg.Webhooks.Backoff, "webhook-backoff", def.Webhooks.Backoff, "wait before a webhook delivery's first retry; each next one doubles")
	f.DurationVar(&o.cfg.Webhooks.MaxBackoff, "webhook-max-backoff", def.Webhooks.MaxBackoff, "longest wait between webhook delivery retries")
	f.DurationVar(&o.cfg.Webhooks.RetryFor, "webhook-retry-for", def.Webhooks.RetryFor, "how long after its event a webhook delivery is retried before it fails")
	f.DurationVar(&o.cfg.Webhooks.Poll, "webhook-poll", def.Webhooks.Poll, "how often the webhook outbox is read when nothing wakes the dispatcher")
	f.StringVar(&o.cfg.MetricsListen, "metrics-listen", def.MetricsListen, "also serve GET /metrics without a key on this address (the API serves it to admin keys)")
	f.DurationVar(&o.cfg.LeaseTTL, "lease-ttl", def.LeaseTTL, "how long the leader lease lasts unrenewed: replicas on one store take over a dead leader within about this long")
	f.StringVar(&o.cfg.Preview.Domain, "preview-domain", def.Preview.Domain, "previews are served at <port>-<sandbox id>.<domain>, each an origin of its own; host[:port] (without a port: the port of the listener that serves them); required")
	f.StringVar(&o.cfg.Preview.Listen, "preview-listen", def.Preview.Listen, "a listener of its own for previews (by Host); empty: the API's listener serves them")
	f.StringVar(&o.cfg.Preview.Scheme, "preview-scheme", def.Preview.Scheme, "scheme of preview URLs (https behind a TLS proxy)")
	f.StringVar(&o.cfg.TLS.Cert, "tls-cert", "", "serve the API and console over TLS (HTTP/2 offered) with this PEM certificate (chain); with --tls-key; both files are read again when they change")
	f.StringVar(&o.cfg.TLS.Key, "tls-key", "", "the PEM private key of --tls-cert")
	f.StringVar(&o.cfg.Preview.TLS.Cert, "preview-tls-cert", "", "serve the preview listener (--preview-listen) over TLS with this PEM certificate, a wildcard for the preview domain; implies --preview-scheme https; with --preview-tls-key")
	f.StringVar(&o.cfg.Preview.TLS.Key, "preview-tls-key", "", "the PEM private key of --preview-tls-cert")
	f.StringVar(&o.cfg.PublicURL, "public-url", "", "the API's and console's URL as clients reach it, http(s)://HOST[:PORT] (behind a TLS-terminating proxy: its URL); used in the links the server makes (default: from --listen and --tls-cert)")
	f.IntVar(&o.cfg.Server.MaxPreviewsPerSandbox, "max-previews-per-sandbox", def.Server.MaxPreviewsPerSandbox, "the previews one sandbox may publish at once")
	f.StringVar(&o.cfg.E2B.APIListen, "e2b-api-listen", "", "serve E2B's REST API on this address (E2B_API_URL; docs/e2b.md); with --e2b-sandbox-listen")
	f.StringVar(&o.cfg.E2B.SandboxListen, "e2b-sandbox-listen", "", "serve E2B's sandbox side (envd) on this address (E2B_SANDBOX_URL); with --e2b-api-listen")
	f.StringArrayVar(&o.e2bTemplates, "e2b-template", nil, "an E2B template name and the cove template or image it stands for, NAME=TEMPLATE (repeatable; e.g. base=managed)")
	f.StringVar(&o.defaultAdmission, "default-admission", "managed_environment", "admission flags of new teams, comma-separated ("+strings.Join(lifecycle.AdmissionFlags, ", ")+", or none)")
}

// config is the configuration the parsed flags describe.
func (o *serveFlags) config() (service.Config, error) {
	cfg := o.cfg
	static, err := staticNames(o.static)
	if err != nil {
		return service.Config{}, err
	}
	cfg.Network.Static = static
	if o.prices != "" {
		if cfg.Server.Prices, err = metering.LoadPrices(o.prices); err != nil {
			return service.Config{}, fmt.Errorf("--prices: %w", err)
		}
	}
	if cfg.Server.DefaultAdmission, err = lifecycle.ParseAdmission(o.defaultAdmission); err != nil {
		return service.Config{}, fmt.Errorf("--default-admission: %w", err)
	}
	for _, t := range o.e2bTemplates {
		name, tmpl, ok := strings.Cut(t, "=")
		if !ok || name == "" || tmpl == "" {
			return service.Config{}, fmt.Errorf("--e2b-template %q: want NAME=TEMPLATE", t)
		}
		if cfg.E2B.Templates == nil {
			cfg.E2B.Templates = map[string]string{}
		}
		cfg.E2B.Templates[name] = tmpl
	}
	return cfg, nil
}

// announceKey prints the admin key once, on stdout and only when stdout
// is a terminal (a file, pipe or journal that keeps the output gets only
// the path of the key's file), and writes the CLI config of the user who
// ran the server, pointing at the API address it bound.
func (a *app) announceKey(cfg service.Config, apiAddr, key string) {
	url := service.PublicURL(cfg, apiAddr)
	keyFile := filepath.Join(cfg.DataDir, "admin-api-key")
	if isTerminal(a.env.Stdout) {
		fmt.Fprintf(a.env.Stdout, "\nadmin API key (shown once; also in %s):\n  %s\n\n", keyFile, key)
	} else {
		fmt.Fprintf(a.env.Stderr, "the admin API key is in %s (mode 0600; printed only to a terminal)\n", keyFile)
	}
	if ConfigPath(a.env.Getenv) != "" {
		if err := SaveProfile(a.env.Getenv, DefaultProfile, Profile{URL: url, APIKey: key}); err != nil {
			fmt.Fprintf(a.env.Stderr, "cove: could not write the CLI config: %v\n", err)
			return
		}
		fmt.Fprintf(a.env.Stderr, "the cove CLI is configured in %s (profile %q)\n", ConfigPath(a.env.Getenv), DefaultProfile)
	}
}

// staticNames parses NAME=IP[,IP] flags.
func staticNames(flags []string) (map[string][]netip.Addr, error) {
	m := map[string][]netip.Addr{}
	for _, f := range flags {
		name, ips, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--dns-static %q: want NAME=IP[,IP]", f)
		}
		for _, s := range strings.Split(ips, ",") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("--dns-static %q: %v", f, err)
			}
			m[strings.ToLower(strings.TrimSuffix(name, "."))] = append(m[strings.ToLower(strings.TrimSuffix(name, "."))], a)
		}
	}
	return m, nil
}
