package runs

import (
	"context"

	"github.com/cove-dev/cove/api"
)

// Admission decides which templates and devices a team may run.
type Admission interface {
	// AdmitTemplate refuses, with permission_denied, a team that lacks
	// the admission the template needs (managed or custom images).
	AdmitTemplate(ctx context.Context, teamID, template string) error
	// AdmitGPUs refuses a team that lacks the gpu admission.
	AdmitGPUs(ctx context.Context, teamID string) error
}

// Images says whether a template can run now and within which limits.
type Images interface {
	// TemplateReady refuses a template that is still being built or
	// whose build failed (unavailable).
	TemplateReady(template string) error
	// CheckLimits refuses resources beyond an imported image's maximum.
	CheckLimits(img *api.Image, res api.Resources) error
}

// Secrets checks a run's references to its team's secrets.
type Secrets interface {
	// CheckRefs checks the variables that name secrets (field names
	// them in errors) against the plain env given beside them.
	CheckRefs(field string, refs, env map[string]string) error
	// Resolve returns the named secrets' values; an unknown one is
	// not_found.
	Resolve(ctx context.Context, teamID string, names map[string]string) (map[string]string, error)
}

// Sources checks that a run's source exists for its team.
type Sources interface {
	// CheckSource refuses an asset source whose asset the team lacks.
	CheckSource(ctx context.Context, teamID string, src *api.Source) error
}

// Budgets refuses new work at a spend limit.
type Budgets interface {
	// TeamRefusal is budget_exceeded when the team's limit is reached.
	TeamRefusal(ctx context.Context, teamID string) error
	// SandboxRefusal is budget_exceeded when the sandbox's own limit,
	// or its team's, is reached.
	SandboxRefusal(ctx context.Context, sb api.Sandbox) error
}

// Checker runs every check a new run passes, in one place.
type Checker struct {
	Admission Admission
	Images    Images
	Secrets   Secrets
	Sources   Sources
	Budgets   Budgets
}

// Check validates sp and runs it through admission, the template's
// readiness and limits, its secrets, its source and the team's budget,
// in that order; the first refusal is the answer.
func (c Checker) Check(ctx context.Context, sp Spec) error {
	if err := sp.Validate(); err != nil {
		return err
	}
	if err := c.Images.CheckLimits(sp.Image, sp.Resources); err != nil {
		return err
	}
	if err := c.Admission.AdmitTemplate(ctx, sp.TeamID, sp.Template); err != nil {
		return err
	}
	if sp.GPUs > 0 {
		if err := c.Admission.AdmitGPUs(ctx, sp.TeamID); err != nil {
			return err
		}
	}
	if err := c.Images.TemplateReady(sp.Template); err != nil {
		return err
	}
	// The secrets must exist now; their values are read when the
	// program starts.
	if err := c.secrets(ctx, sp.TeamID, "secrets", sp.Secrets, sp.Env); err != nil {
		return err
	}
	if err := c.Budget(ctx, sp); err != nil {
		return err
	}
	if err := c.Sources.CheckSource(ctx, sp.TeamID, sp.Source); err != nil {
		return err
	}
	if st := sp.Setup; st != nil {
		if err := st.Validate(); err != nil {
			return err
		}
		if err := c.secrets(ctx, sp.TeamID, "setup.secrets", st.Secrets, st.Env); err != nil {
			return err
		}
	}
	if src := sp.Source; src != nil && src.AuthSecret != "" {
		if _, err := c.Secrets.Resolve(ctx, sp.TeamID, map[string]string{"token": src.AuthSecret}); err != nil {
			return err
		}
	}
	return nil
}

func (c Checker) secrets(ctx context.Context, teamID, field string, refs, env map[string]string) error {
	if len(refs) == 0 {
		return nil
	}
	if err := c.Secrets.CheckRefs(field, refs, env); err != nil {
		return err
	}
	_, err := c.Secrets.Resolve(ctx, teamID, refs)
	return err
}

// Budget is the budget rule of every run: a run in an existing sandbox
// that still lives (a command) is refused at the sandbox's spend limit
// or its team's; any other at its team's.
func (c Checker) Budget(ctx context.Context, sp Spec) error {
	if sb := sp.Sandbox; sb != nil {
		if sb.State.Terminal() {
			return nil
		}
		return c.Budgets.SandboxRefusal(ctx, *sb)
	}
	return c.Budgets.TeamRefusal(ctx, sp.TeamID)
}
