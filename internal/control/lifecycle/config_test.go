package lifecycle

import (
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/node"
)

// TestConfigValidate: the defaults validate once a template is there, and
// each zero or impossible value is refused with a message naming it.
func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   string // "" validates
	}{
		{"defaults", func(*Config) {}, ""},
		{"no templates", func(c *Config) { c.Templates = nil }, "no templates"},
		{"zero config", func(c *Config) { *c = Config{Templates: c.Templates} }, "default template"},
		{"zero max cpus", func(c *Config) { c.MaxResources.CPUs = 0 }, "exceed the maximum"},
		{"tiny default memory", func(c *Config) { c.DefaultResources.MemoryMiB = 1 }, "below the minimum"},
		{"zero pids", func(c *Config) { c.PidsLimit = 0 }, "pids limit"},
		{"relative workdir", func(c *Config) { c.DefaultWorkdir = "work" }, "default workdir"},
		{"zero wait output", func(c *Config) { c.WaitOutputMax = 0 }, "wait output max"},
		{"zero max wait", func(c *Config) { c.MaxWait = 0 }, "max wait"},
		{"negative warm pool", func(c *Config) { c.WarmPool = -1 }, "warm pool"},
		{"no warm pool", func(c *Config) { c.WarmPool = 0 }, ""},
		{"zero limits interval", func(c *Config) { c.LimitsInterval = 0 }, "limits interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Templates = []string{node.ManagedTemplate}
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
