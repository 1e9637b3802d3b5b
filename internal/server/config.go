package server

import (
	"fmt"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node/image"
)

// Resource floors: below these a Debian userland does not start reliably.
const (
	MinMemoryMiB = 64
	MinDiskMiB   = 64
)

// Config is the control plane's configuration. Zero fields take the defaults
// documented on each.
type Config struct {
	// Templates maps template names to images; "managed" is the default.
	Templates map[string]image.Image
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
	WarmPool int
	// LimitsInterval is how often idle and lifetime limits are checked.
	// Default 1 second.
	LimitsInterval time.Duration
}

func (c *Config) setDefaults() {
	if c.DefaultTemplate == "" {
		c.DefaultTemplate = "managed"
	}
	if c.DefaultResources == (api.Resources{}) {
		c.DefaultResources = api.Resources{CPUs: 1, MemoryMiB: 1024, DiskMiB: 4096}
	}
	if c.MaxResources == (api.Resources{}) {
		c.MaxResources = api.Resources{CPUs: 2, MemoryMiB: 8192, DiskMiB: 20480}
	}
	if c.WarmPool < 0 {
		c.WarmPool = 0
	}
	if c.PidsLimit == 0 {
		c.PidsLimit = 1024
	}
	if c.DefaultWorkdir == "" {
		c.DefaultWorkdir = "/workspace"
	}
	if c.WaitOutputMax == 0 {
		c.WaitOutputMax = 1 << 20
	}
	if c.MaxWait == 0 {
		c.MaxWait = 10 * time.Minute
	}
	if c.LimitsInterval == 0 {
		c.LimitsInterval = time.Second
	}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	c.setDefaults()
	if len(c.Templates) == 0 {
		return fmt.Errorf("no templates configured")
	}
	if _, ok := c.Templates[c.DefaultTemplate]; !ok {
		return fmt.Errorf("default template %q is not configured", c.DefaultTemplate)
	}
	d, m := c.DefaultResources, c.MaxResources
	if d.CPUs > m.CPUs || d.MemoryMiB > m.MemoryMiB || d.DiskMiB > m.DiskMiB {
		return fmt.Errorf("default resources %+v exceed the maximum %+v", d, m)
	}
	if d.MemoryMiB < MinMemoryMiB || d.DiskMiB < MinDiskMiB || d.CPUs <= 0 {
		return fmt.Errorf("default resources %+v are below the minimum", d)
	}
	return nil
}
