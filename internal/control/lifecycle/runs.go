package lifecycle

import (
	"context"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/imagecatalog"
	"github.com/cove-dev/cove/internal/control/runs"
	"github.com/cove-dev/cove/internal/control/teams"
	"github.com/cove-dev/cove/internal/control/vault"
)

// The checks of every new run (a sandbox with its setup, a workload) are
// made in one place, runs.Checker, over runChecks: admission, the
// template's readiness and limits, secrets, source and the team's budget.

// sandboxRun is the run of a new sandbox, with its setup's.
func sandboxRun(sb api.Sandbox, img *api.Image) runs.Spec {
	return runs.Spec{
		Kind: runs.Sandbox, TeamID: sb.TeamID, Template: sb.Template, Image: img,
		Resources: sb.Resources, Env: sb.Env, Secrets: sb.Secrets, Workdir: sb.Workdir,
		Source: sb.Source, Network: sb.Network, Setup: setupRun(sb),
	}
}

// setupRun is the run of a sandbox's setup command; nil when it has none.
func setupRun(sb api.Sandbox) *runs.Spec {
	st := sb.Setup
	if st == nil || st.Command == "" {
		return nil
	}
	return &runs.Spec{
		Kind: runs.Setup, TeamID: sb.TeamID, Template: sb.Template, Resources: sb.Resources,
		Command: st.Command, Env: st.Env, Secrets: st.Secrets, Workdir: sb.Workdir,
		Network: api.NetworkPolicy{Allow: sb.Network.SetupAllow}, TimeoutS: st.TimeoutS,
	}
}

// runChecks answers runs.Checker through the core's services.
type runChecks struct{ s *Core }

var (
	_ runs.Admission = runChecks{}
	_ runs.Images    = runChecks{}
	_ runs.Secrets   = runChecks{}
	_ runs.Sources   = runChecks{}
	_ runs.Budgets   = runChecks{}
)

func (c runChecks) AdmitTemplate(ctx context.Context, teamID, template string) error {
	return c.s.svc.Teams.RequireAdmission(ctx, teamID, c.s.svc.Templates.Admission(teamID, template))
}

func (c runChecks) AdmitGPUs(ctx context.Context, teamID string) error {
	return c.s.svc.Teams.RequireAdmission(ctx, teamID, teams.AdmitGPU)
}

func (c runChecks) TemplateReady(template string) error { return c.s.svc.Templates.Check(template) }

func (c runChecks) CheckLimits(img *api.Image, res api.Resources) error {
	return imagecatalog.CheckLimits(img, res, MinMemoryMiB, MinDiskMiB)
}

func (c runChecks) CheckRefs(field string, refs, env map[string]string) error {
	return vault.CheckRefs(field, refs, env, maxEnv)
}

// Resolve reads secrets through the resolver set for provisioning (the
// secrets store unless a test replaced it), else through the store.
func (c runChecks) Resolve(ctx context.Context, teamID string, names map[string]string) (map[string]string, error) {
	if c.s.secrets != nil {
		return c.s.secrets.ResolveSecrets(ctx, teamID, names)
	}
	return c.s.svc.Vault.Values(ctx, teamID, names)
}

func (c runChecks) CheckSource(ctx context.Context, teamID string, src *api.Source) error {
	return c.s.svc.Assets.CheckSource(ctx, teamID, src)
}

func (c runChecks) TeamRefusal(ctx context.Context, teamID string) error {
	return c.s.svc.Meter.TeamBudgetRefusal(ctx, teamID)
}
