// Package e2b lets programs written for E2B's SDKs use cove: two
// listeners that speak E2B's protocol and translate it to cove's control
// plane. The API listener (API) is E2B's REST API: sandboxes are created,
// listed, paused, resumed and killed as cove sandboxes of the key's team,
// with their limits, metering, network policy and events. The sandbox
// listener (SandboxSide) is what E2B's in-sandbox daemon, envd, serves,
// found by the E2b-Sandbox-Id header and opened by the sandbox's access
// token.
//
// Nothing here keeps state of its own: an E2B sandbox is a cove sandbox
// with labels under LabelPrefix, and its access token is derived from a
// secret of the server (Tokens), so both survive a restart without a
// store of their own. The one exception is polled watchers
// (watchers.go), kept in memory, bounded, by the listener that made them.
package e2b

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/control/teams"
	"github.com/cove-dev/cove/internal/node"
)

// EnvdVersion is the version of envd's protocol the sandbox listener
// speaks, reported to the SDKs, which enable features by it.
const EnvdVersion = "0.6.4"

// LabelPrefix marks the labels the translator keeps on a cove sandbox;
// they are not shown as E2B metadata.
const LabelPrefix = "e2b/"

// labelTemplate holds the E2B template name a sandbox was created from.
const labelTemplate = LabelPrefix + "template"

// Sandboxes are the sandbox life cycle's calls the translator makes
// (lifecycle.Core).
type Sandboxes interface {
	CreateSandboxWith(ctx context.Context, teamID string, req api.CreateSandboxRequest, opts lifecycle.CreateOptions) (api.Sandbox, error)
	GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error)
	WaitSandbox(ctx context.Context, teamID, ref string, want api.SandboxState, timeout time.Duration) (api.Sandbox, error)
	ListSandboxes(ctx context.Context, teamID string, q lifecycle.SandboxQuery) (api.List[api.Sandbox], error)
	UpdateSandbox(ctx context.Context, teamID, ref string, req api.UpdateSandboxRequest) (api.Sandbox, error)
	TerminateSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error)
	SleepSandbox(ctx context.Context, teamID, ref, reason string) (api.Sandbox, error)
	WakeSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error)
}

// Keys authenticate E2B's X-API-Key, which is a cove key (teams.Service).
type Keys interface {
	Authenticate(ctx context.Context, key string) (teams.Principal, error)
}

// Metrics are a sandbox's resource samples (meter.Meter).
type Metrics interface {
	Metrics(ctx context.Context, teamID, ref string, q meter.MetricsQuery) (api.Metrics, error)
}

var (
	_ Sandboxes = (*lifecycle.Core)(nil)
	_ Keys      = (*teams.Service)(nil)
	_ Metrics   = (*meter.Meter)(nil)
)

// Config is what the translator is told by the server's configuration.
type Config struct {
	// Templates maps E2B template names to cove templates or images
	// (`--e2b-template base=managed`); a name not in it is passed to cove
	// as it is, but for BaseTemplate, which is the managed template
	// unless mapped.
	Templates map[string]string
	// ReadyTimeout bounds how long a create or a resume waits for the
	// sandbox to run. Default 2 minutes.
	ReadyTimeout time.Duration
}

func (c Config) readyTimeout() time.Duration {
	if c.ReadyTimeout > 0 {
		return c.ReadyTimeout
	}
	return 2 * time.Minute
}

// coveTemplate is the cove template an E2B template name stands for.
func (c Config) coveTemplate(name string) string {
	if t, ok := c.Templates[name]; ok {
		return t
	}
	if name == BaseTemplate {
		return node.ManagedTemplate
	}
	return name
}

// BaseTemplate is the E2B template SDKs create from when they name none:
// user and group user (home /home/user), bash, python3, coreutils and
// passwordless sudo. The managed template is that; it stands for base
// unless Config.Templates maps base elsewhere.
const BaseTemplate = "base"
