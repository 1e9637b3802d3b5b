package service

import (
	"log/slog"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/assets"
	"github.com/cove-dev/cove/internal/control/commands"
	"github.com/cove-dev/cove/internal/control/events"
	"github.com/cove-dev/cove/internal/control/files"
	"github.com/cove-dev/cove/internal/control/imagecatalog"
	"github.com/cove-dev/cove/internal/control/lifecycle"
	"github.com/cove-dev/cove/internal/control/meter"
	"github.com/cove-dev/cove/internal/control/observations"
	"github.com/cove-dev/cove/internal/control/previews"
	"github.com/cove-dev/cove/internal/control/teams"
	"github.com/cove-dev/cove/internal/control/templatecatalog"
	"github.com/cove-dev/cove/internal/control/uploads"
	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/control/workloads"
	"github.com/cove-dev/cove/internal/httpapi"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/webhooks"
)

// Plane is the control plane, wired: the core (the sandbox life cycle)
// and the feature services over it.
type Plane struct {
	Core         *lifecycle.Core
	Teams        *teams.Service
	Vault        *vault.Service
	Webhooks     *webhooks.Service
	Meter        *meter.Meter
	Observations *observations.Service
	Images       *imagecatalog.Catalog
	Templates    *templatecatalog.Catalog
	Previews     *previews.Service
	Uploads      *uploads.Ledger
	Files        *files.Service
	Assets       *assets.Service
	Workloads    *workloads.Service
	Events       *events.Log
	Commands     *commands.Service
	// Nodes and JoinTokens are a fleet's (`cove control`); nil in
	// `cove serve`.
	Nodes      httpapi.Nodes
	JoinTokens httpapi.JoinTokens
}

// NewPlane builds the control plane over st, in this order: the core,
// then each feature service over the core's ports (and the services it
// needs), then the core is given the services it calls (Use). Connect
// the node with SetNode before Recover; Close closes the core.
func NewPlane(cfg lifecycle.Config, st store.Store, log *slog.Logger) (*Plane, error) {
	core, err := lifecycle.New(cfg, st, log)
	if err != nil {
		return nil, err
	}
	c := core.Ports()
	p := &Plane{Core: core}
	p.Events = events.New(events.Config{Retention: cfg.EventRetention}, st, c.Events, c.Events, c.Events, log, c.Clock)
	p.Teams = teams.New(teams.Config{
		DefaultAdmission: cfg.DefaultAdmission,
		Limits: api.TeamLimits{
			DefaultResources: cfg.DefaultResources, MaxResources: cfg.MaxResources, PidsLimit: cfg.PidsLimit,
		},
		CheckAlerts: meter.ValidateBudgetAlerts,
		// Answers are kept after they are given, until the core closes
		// (before the store does).
		Keeper: c.WG,
	}, st, log, c.Clock)
	p.Vault = vault.New(vault.Config{Keyring: cfg.Secrets, MaxEnv: lifecycle.MaxEnv, MaxValue: lifecycle.MaxEnvValue, Changed: core.SecretChanged}, st, log, c.Clock)
	p.Webhooks = webhooks.NewService(webhooks.ServiceConfig{AllowPrivate: cfg.WebhookAllowPrivate}, st, p.Vault, log, c.Clock)
	p.Meter = meter.New(meter.Config{
		Prices: cfg.Prices, Interval: cfg.MetricsInterval,
		RawRetention: cfg.MetricsRawRetention, RollupRetention: cfg.MetricsRollupRetention,
	}, st, c.Lifecycle, c.Lifecycle, c.Clock, log)
	p.Observations = observations.New(observations.Config{
		Flush: cfg.ObservationFlush, Max: cfg.MaxObservations, Retention: cfg.EventRetention,
	}, st, c.Node, c.Lifecycle, c.Clock, log)
	p.Images = imagecatalog.New(imagecatalog.Config{
		Templates: cfg.Templates, MaxBytesPerTeam: cfg.MaxImageBytesPerTeam,
		AdminTeam: teams.AdminTeam, AdmitFlag: teams.AdmitImages, MaxCommandBytes: lifecycle.MaxCommandBytes,
	}, imagecatalog.Deps{
		Store: st, Admission: c.Features, Events: c.Features, Uploads: c.Features, Workloads: c.Features,
		Validate: c.Features, Log: log, Now: c.Clock,
	})
	p.Templates = templatecatalog.New(templatecatalog.Config{
		Templates: cfg.Templates, ManagedFlag: teams.AdmitManaged, ImagesFlag: teams.AdmitImages,
	}, st, p.Images, c.Features)
	p.Previews = previews.New(previews.Config{MaxPerSandbox: cfg.MaxPreviewsPerSandbox, AdmitFlag: teams.AdmitPreview},
		previews.Deps{Store: st, Lifecycle: c.Features, Admission: c.Features, Log: log, Now: c.Clock})
	p.Uploads = uploads.New(uploads.Config{MaxPerTeam: cfg.MaxUploadsPerTeam, Dir: cfg.UploadDir}, c.Node)
	p.Files = files.New(c.Node, c.Sandboxes)
	p.Assets = assets.New(assets.Config{MaxBytes: cfg.MaxSourceBytes, MaxTeamBytes: cfg.MaxTeamAssetBytes},
		st, c.Node, c.Sandboxes, p.Uploads, c.Clock, log)
	p.Workloads = workloads.New(c.Ctx, c.WG, workloads.Config{
		DefaultTemplate: cfg.DefaultTemplate, Templates: cfg.Templates, DefaultWorkdir: cfg.DefaultWorkdir,
		MaxQueuedWorkloadsPerTeam: cfg.MaxQueuedWorkloadsPerTeam, PidsLimit: cfg.PidsLimit,
		Prices: cfg.Prices, MaxWait: cfg.MaxWait,
	}, workloads.Deps{
		Store: st, Core: c.Workloads, Images: c.Workloads, Events: c.Workloads, Meter: c.Workloads,
		Checks: c.Checks, Exits: c.Exits, Log: log, Now: c.Clock,
	})
	p.Commands = commands.New(c.Ctx, c.WG, commands.Config{WaitOutputMax: cfg.WaitOutputMax}, commands.Deps{
		Store: st, Node: c.Node, Sandboxes: c.Commands, Images: c.Commands, Secrets: c.CommandSecrets,
		Events: p.Events, Telemetry: c.CommandTelemetry, Checks: c.Checks, Log: log, Now: c.Clock,
	})
	core.Use(lifecycle.Services{
		Teams: p.Teams, Vault: p.Vault, Meter: p.Meter, Observations: p.Observations,
		Images: p.Images, Templates: p.Templates, Previews: p.Previews,
		Uploads: p.Uploads, Assets: p.Assets, Workloads: p.Workloads,
		Events: p.Events, Commands: p.Commands,
	})
	return p, nil
}

// SetNode connects the node to the core and to the services that call it
// directly; call it before Recover.
func (p *Plane) SetNode(n lifecycle.Node) {
	p.Core.SetNode(n)
	p.Workloads.SetNode(n)
	p.Previews.SetNode(n)
}

// Handler is the HTTP API over the plane, one field per service.
func (p *Plane) Handler(log *slog.Logger) *httpapi.Handler {
	h := httpapi.New(log)
	h.Teams, h.Idempotency = p.Teams, p.Teams
	h.Secrets, h.Webhooks = p.Vault, p.Webhooks
	h.Files, h.Assets = p.Files, p.Assets
	h.ImageService, h.TemplateService, h.PreviewService = p.Images, p.Templates, p.Previews
	h.Sandboxes, h.Commands, h.Events = p.Core, p.Commands, p.Events
	h.Snapshots, h.Volumes = p.Core, p.Core
	h.Workloads, h.GPUs = p.Workloads, p.Workloads
	h.Metering, h.Observations = p.Meter, p.Observations
	h.Nodes, h.JoinTokens = p.Nodes, p.JoinTokens
	return h
}
