package server

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cove-dev/cove/api"
)

// admission flags, by their names in the API and the CLI.
const (
	admitManaged = "managed_environment"
	admitPreview = "preview"
	admitImages  = "custom_images"
	admitGPU     = "gpu"
)

// AdmissionFlags are the names of the admission flags.
var AdmissionFlags = []string{admitManaged, admitPreview, admitImages, admitGPU}

// ParseAdmission reads a comma-separated list of admission flags
// (`--default-admission managed_environment,preview`); "none" is none.
func ParseAdmission(s string) (api.Admission, error) {
	var a api.Admission
	if s == "" || s == "none" {
		return a, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !setAdmission(&a, f, true) {
			return a, fmt.Errorf("admission flag %q is unknown; use %s", f, strings.Join(AdmissionFlags, ", "))
		}
	}
	return a, nil
}

func setAdmission(a *api.Admission, flag string, v bool) bool {
	switch flag {
	case admitManaged:
		a.ManagedEnvironment = v
	case admitPreview:
		a.Preview = v
	case admitImages:
		a.CustomImages = v
	case admitGPU:
		a.GPU = v
	default:
		return false
	}
	return true
}

func hasAdmission(a api.Admission, flag string) bool {
	switch flag {
	case admitManaged:
		return a.ManagedEnvironment
	case admitPreview:
		return a.Preview
	case admitImages:
		return a.CustomImages
	case admitGPU:
		return a.GPU
	}
	return false
}

// allAdmission is the admin team's: every flag.
var allAdmission = api.Admission{ManagedEnvironment: true, Preview: true, CustomImages: true, GPU: true}

// effectiveAdmission is what a team may use: the admin team everything.
func effectiveAdmission(t api.Team) api.Admission {
	if t.Name == AdminTeam {
		return allAdmission
	}
	return t.Admission
}

// requireAdmission refuses, with permission_denied naming the flag and the
// command an admin runs to grant it, a team that lacks flag.
func (s *Server) requireAdmission(ctx context.Context, teamID, flag string) error {
	t, err := s.store.GetTeam(ctx, teamID)
	if err != nil {
		return err
	}
	if hasAdmission(effectiveAdmission(t), flag) {
		return nil
	}
	return &api.Error{
		Code: api.CodePermissionDenied,
		Message: fmt.Sprintf("team %s lacks the %q admission; ask an admin of this server to run: cove teams admit %s --%s",
			t.Name, flag, t.Name, strings.ReplaceAll(flag, "_", "-")),
		Details: map[string]any{"admission": flag, "team": t.Name},
	}
}

// checkAdmissionChange refuses to take a flag from the admin team, which
// has every one (UpdateTeam).
func checkAdmissionChange(t api.Team, a *api.Admission) error {
	if a != nil && t.Name == AdminTeam && *a != allAdmission {
		return invalid("the admin team has every admission flag; they cannot be taken from it")
	}
	return nil
}

// TeamMe describes the principal's own team: its admission and limits.
func (s *Server) TeamMe(ctx context.Context, p Principal) (api.TeamMe, error) {
	t, err := s.store.GetTeam(ctx, p.Team.ID)
	if err != nil {
		return api.TeamMe{}, err
	}
	t.Admission = effectiveAdmission(t)
	var flags []string
	for _, f := range AdmissionFlags {
		if hasAdmission(t.Admission, f) {
			flags = append(flags, f)
		}
	}
	return api.TeamMe{
		Team: t, Admin: p.Admin(), Admitted: slices.Clip(append([]string{}, flags...)),
		Limits: api.TeamLimits{
			DefaultResources: s.cfg.DefaultResources, MaxResources: s.cfg.MaxResources,
			PidsLimit: s.cfg.PidsLimit,
		},
	}, nil
}

// templateAdmission is the flag a template needs: every template the
// server ships (the managed image and the images in its images dir) is a
// managed environment; an imported image (as team teamID names it) needs
// custom_images.
func (s *Server) templateAdmission(teamID, tmpl string) string {
	if _, ok := s.image(teamID, tmpl); ok {
		return admitImages
	}
	return admitManaged
}
