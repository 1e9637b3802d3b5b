package lifecycle

import (
	"fmt"
	"path"
	"slices"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/secrets"
)

// Resource floors: below these a Debian userland does not start reliably.
const (
	MinMemoryMiB = 64
	MinDiskMiB   = 64
)

// Config is the control plane's configuration. DefaultConfig holds the
// default of every field; Validate refuses what cannot work, zero values
// included.
type Config struct {
	// Templates are the names of the templates the node has images for;
	// "managed" is the default.
	Templates []string
	// DefaultTemplate is used when a request names none. Default "managed".
	DefaultTemplate string
	// DefaultResources apply to fields a create request leaves out.
	// Default 1 CPU, 1024 MiB memory, 4096 MiB disk.
	DefaultResources api.Resources
	// MaxResources bound what one sandbox may reserve.
	// Default 2 CPUs, 8192 MiB memory, 20480 MiB disk.
	MaxResources api.Resources
	// PidsLimit bounds the processes of one sandbox. Default 1024.
	PidsLimit int64
	// DefaultWorkdir is a sandbox's working directory unless the request
	// names one. Default /workspace.
	DefaultWorkdir string
	// WaitOutputMax bounds the stdout and stderr returned by ?wait=true
	// (each); the rest stays available through the output calls.
	// Default 1 MiB.
	WaitOutputMax int64
	// MaxWait bounds a long-poll (?wait=…&timeout_s=). Default 10 minutes.
	MaxWait time.Duration
	// WarmPool is how many ready sandboxes of the default template and
	// resources the server keeps to hand out at once. 0 keeps none.
	// Default 1.
	WarmPool int
	// WarmPoolSetID is how many more the pool keeps whose set-uid
	// programs work (api.Sandbox.SetID), for the creates that ask for it:
	// the server keeps WarmPool of them while E2B's listeners serve.
	// Default 0.
	WarmPoolSetID int
	// EventRetention is how long events are kept, and network observations
	// after they were last seen. Default 30 days.
	EventRetention time.Duration
	// ObservationFlush is how often the node's network observations are
	// added to the store (one transaction each time). Default 1 second.
	ObservationFlush time.Duration
	// MaxObservations bounds the network observations kept per sandbox;
	// past it new destinations are counted as "other", port 0.
	// Default 4096.
	MaxObservations int
	// LimitsInterval is how often idle and lifetime limits are checked.
	// Default 1 second.
	LimitsInterval time.Duration
	// Secrets seals and opens teams' secrets and webhooks' signing
	// secrets. Default nil: secrets calls and webhook creation answer
	// unavailable (cove serve always gives one).
	Secrets *secrets.Keyring
	// MetricsInterval is how often the meter samples every running
	// sandbox, accrues costs and checks spend limits. Default 5 seconds.
	MetricsInterval time.Duration
	// MetricsRawRetention is how long raw samples are kept; 1-minute
	// rollups (average and maximum) are kept for MetricsRollupRetention.
	// Defaults 24 hours and 30 days.
	MetricsRawRetention    time.Duration
	MetricsRollupRetention time.Duration
	// Prices is the price table. Default metering.DefaultPrices.
	Prices api.Prices
	// KeepSaveAfterWake keeps a woken sandbox's save as its recovery
	// point while it runs (a fleet with a shared save store: a lost
	// node's sandbox wakes from it elsewhere); terminating still removes
	// it. Default false: the save is dropped once the sandbox runs.
	KeepSaveAfterWake bool
	// UploadTimeout is how long a sandbox created with source upload
	// waits for its archive before it fails. Default 15 minutes.
	UploadTimeout time.Duration
	// MaxSourceBytes bounds a source upload's archive (as sent) and an
	// asset. Default 8 GiB.
	MaxSourceBytes int64
	// MaxTeamAssetBytes bounds the assets of one team together; past it
	// a new asset answers 507. Default 20 GiB.
	MaxTeamAssetBytes int64
	// MaxImageBytesPerTeam bounds one team's imported images together
	// (their unpacked trees) and its image archives being received; past
	// it an import answers 507. Default 40 GiB.
	MaxImageBytesPerTeam int64
	// MaxUploadsPerTeam bounds the uploads (images, assets, source
	// uploads) one team has open at once; past it they answer 429.
	// Default 4.
	MaxUploadsPerTeam int
	// UploadDir holds uploads while they arrive, each in a private
	// temporary file removed when it is used or fails. Default "" (the
	// system's temporary directory); cove serve uses <data dir>/uploads,
	// on the data disk its admission counts.
	UploadDir string
	// SetupCacheEntries and SetupCacheBytes bound one team's setup cache;
	// past either, the least recently used entries are evicted. Default
	// 16 entries, 10 GiB.
	SetupCacheEntries int
	SetupCacheBytes   int64
	// WebhookAllowPrivate accepts webhook URLs of private, loopback and
	// other non-public addresses. Default false.
	WebhookAllowPrivate bool
	// MaxQueuedWorkloadsPerTeam bounds the workloads one team may have
	// queued; a submit past it answers 429. Default 100.
	MaxQueuedWorkloadsPerTeam int
	// DefaultAdmission is what a new team may use. Default: the managed
	// environment only.
	DefaultAdmission api.Admission

	// MaxPreviewsPerSandbox bounds the previews one sandbox publishes at
	// once; past it a new one answers 409 until one is deleted. Default 32.
	MaxPreviewsPerSandbox int

	// MaxFork bounds the count of one fork; past it the fork answers
	// 400 naming the limit. Default 100.
	MaxFork int
	// MaxSnapshotsPerTeam and MaxSnapshotBytesPerTeam bound one team's
	// snapshots (a fork's included) together; past either a new one
	// answers 507. Default 100 snapshots, 100 GiB.
	MaxSnapshotsPerTeam     int
	MaxSnapshotBytesPerTeam int64

	// MaxVolumeMiB bounds one volume's size; past it a create answers
	// 400 naming the limit. Default 10240 (10 GiB).
	MaxVolumeMiB int64
	// MaxVolumesPerTeam and MaxVolumeMiBPerTeam bound one team's volumes
	// together; past either a new one answers 507. Default 100 volumes,
	// 102400 MiB (100 GiB).
	MaxVolumesPerTeam   int
	MaxVolumeMiBPerTeam int64
	// VolumeUsageInterval is how often the volumes running sandboxes
	// mount are measured (used_bytes, volume.full). Default 5 seconds.
	VolumeUsageInterval time.Duration
}

// DefaultConfig is the control plane's configuration with every default
// set, except Templates, which the caller fills.
func DefaultConfig() Config {
	return Config{
		DefaultTemplate:  node.ManagedTemplate,
		DefaultResources: api.Resources{CPUs: 1, MemoryMiB: 1024, DiskMiB: 4096},
		MaxResources:     api.Resources{CPUs: 2, MemoryMiB: 8192, DiskMiB: 20480},
		PidsLimit:        1024,
		DefaultWorkdir:   "/workspace",
		WaitOutputMax:    1 << 20,
		MaxWait:          10 * time.Minute,
		WarmPool:         1,
		LimitsInterval:   time.Second,
		EventRetention:   30 * 24 * time.Hour,
		ObservationFlush: time.Second,
		MaxObservations:  4096,

		MetricsInterval:        5 * time.Second,
		MetricsRawRetention:    24 * time.Hour,
		MetricsRollupRetention: 30 * 24 * time.Hour,
		Prices:                 metering.DefaultPrices,
		UploadTimeout:          15 * time.Minute,
		MaxSourceBytes:         8 << 30,
		MaxTeamAssetBytes:      20 << 30,
		MaxImageBytesPerTeam:   40 << 30,
		MaxUploadsPerTeam:      4,
		SetupCacheEntries:      16,
		SetupCacheBytes:        10 << 30,
		DefaultAdmission:       api.Admission{ManagedEnvironment: true},

		MaxPreviewsPerSandbox:     32,
		MaxQueuedWorkloadsPerTeam: 100,

		MaxFork:                 100,
		MaxSnapshotsPerTeam:     100,
		MaxSnapshotBytesPerTeam: 100 << 30,

		MaxVolumeMiB:        10240,
		MaxVolumesPerTeam:   100,
		MaxVolumeMiBPerTeam: 100 << 10,
		VolumeUsageInterval: 5 * time.Second,
	}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	if len(c.Templates) == 0 {
		return fmt.Errorf("no templates configured")
	}
	if !slices.Contains(c.Templates, c.DefaultTemplate) {
		return fmt.Errorf("default template %q is not configured", c.DefaultTemplate)
	}
	d, m := c.DefaultResources, c.MaxResources
	if d.CPUs > m.CPUs || d.MemoryMiB > m.MemoryMiB || d.DiskMiB > m.DiskMiB {
		return fmt.Errorf("default resources %+v exceed the maximum %+v", d, m)
	}
	if d.MemoryMiB < MinMemoryMiB || d.DiskMiB < MinDiskMiB || d.CPUs <= 0 {
		return fmt.Errorf("default resources %+v are below the minimum (%d MiB memory, %d MiB disk, CPUs above 0)", d, MinMemoryMiB, MinDiskMiB)
	}
	switch {
	case c.PidsLimit <= 0:
		return fmt.Errorf("pids limit %d: want at least 1", c.PidsLimit)
	case !path.IsAbs(c.DefaultWorkdir):
		return fmt.Errorf("default workdir %q: want an absolute path", c.DefaultWorkdir)
	case c.WaitOutputMax <= 0:
		return fmt.Errorf("wait output max %d: want at least 1 byte", c.WaitOutputMax)
	case c.MaxWait <= 0:
		return fmt.Errorf("max wait %v: want a positive duration", c.MaxWait)
	case c.WarmPool < 0:
		return fmt.Errorf("warm pool %d: want 0 or more", c.WarmPool)
	case c.WarmPoolSetID < 0:
		return fmt.Errorf("warm pool of set-uid sandboxes %d: want 0 or more", c.WarmPoolSetID)
	case c.EventRetention < time.Hour:
		return fmt.Errorf("event retention %v: want at least an hour", c.EventRetention)
	case c.ObservationFlush <= 0:
		return fmt.Errorf("observation flush %v: want a positive duration", c.ObservationFlush)
	case c.MaxObservations <= 0:
		return fmt.Errorf("max observations %d: want at least 1", c.MaxObservations)
	case c.LimitsInterval <= 0:
		return fmt.Errorf("limits interval %v: want a positive duration", c.LimitsInterval)
	case c.MetricsInterval < 100*time.Millisecond:
		return fmt.Errorf("metrics interval %v: want at least 100ms", c.MetricsInterval)
	case c.MetricsRawRetention < c.MetricsInterval || c.MetricsRollupRetention < time.Minute:
		return fmt.Errorf("metrics retention (raw %v, rollups %v): want raw at least one interval and rollups at least a minute", c.MetricsRawRetention, c.MetricsRollupRetention)
	case c.UploadTimeout <= 0:
		return fmt.Errorf("upload timeout %v: want a positive duration", c.UploadTimeout)
	case c.MaxSourceBytes <= 0:
		return fmt.Errorf("max source bytes %d: want at least 1", c.MaxSourceBytes)
	case c.SetupCacheEntries < 0 || c.SetupCacheBytes < 0:
		return fmt.Errorf("setup cache bounds %d entries, %d bytes: want 0 or more", c.SetupCacheEntries, c.SetupCacheBytes)
	case c.MaxQueuedWorkloadsPerTeam <= 0:
		return fmt.Errorf("max queued workloads per team %d: want at least 1", c.MaxQueuedWorkloadsPerTeam)
	case c.MaxImageBytesPerTeam <= 0:
		return fmt.Errorf("max image bytes per team %d: want at least 1", c.MaxImageBytesPerTeam)
	case c.MaxUploadsPerTeam <= 0:
		return fmt.Errorf("max uploads per team %d: want at least 1", c.MaxUploadsPerTeam)
	case c.MaxTeamAssetBytes <= 0:
		return fmt.Errorf("max team asset bytes %d: want at least 1", c.MaxTeamAssetBytes)
	case c.MaxVolumeMiB != 0 && c.MaxVolumeMiB < MinVolumeMiB:
		return fmt.Errorf("max volume size %d MiB: want at least %d", c.MaxVolumeMiB, MinVolumeMiB)
	case c.MaxVolumesPerTeam < 0 || c.MaxVolumeMiBPerTeam < 0:
		return fmt.Errorf("volume caps per team (%d volumes, %d MiB): want 0 (none) or more", c.MaxVolumesPerTeam, c.MaxVolumeMiBPerTeam)
	case c.VolumeUsageInterval < 0:
		return fmt.Errorf("volume usage interval %v: want a positive duration", c.VolumeUsageInterval)
	case c.MaxPreviewsPerSandbox < 1 || c.MaxPreviewsPerSandbox > 65535:
		return fmt.Errorf("max previews per sandbox %d: want 1 to 65535", c.MaxPreviewsPerSandbox)
	}
	if err := metering.ValidatePrices(c.Prices); err != nil {
		return err
	}
	return nil
}
