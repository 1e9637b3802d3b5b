package teams

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/cove-dev/cove/api"
)

// Admission flags, by their names in the API and the CLI.
const (
	AdmitManaged = "managed_environment"
	AdmitPreview = "preview"
	AdmitImages  = "custom_images"
	AdmitGPU     = "gpu"
)

// AdmissionFlags are the names of the admission flags.
var AdmissionFlags = []string{AdmitManaged, AdmitPreview, AdmitImages, AdmitGPU}

// All is the admin team's admission: every flag.
var All = api.Admission{ManagedEnvironment: true, Preview: true, CustomImages: true, GPU: true}

// ParseAdmission reads a comma-separated list of admission flags
// (`--default-admission managed_environment,preview`); "none" is none.
func ParseAdmission(s string) (api.Admission, error) {
	var a api.Admission
	if s == "" || s == "none" {
		return a, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if !set(&a, f, true) {
			return a, fmt.Errorf("admission flag %q is unknown; use %s", f, strings.Join(AdmissionFlags, ", "))
		}
	}
	return a, nil
}

func set(a *api.Admission, flag string, v bool) bool {
	switch flag {
	case AdmitManaged:
		a.ManagedEnvironment = v
	case AdmitPreview:
		a.Preview = v
	case AdmitImages:
		a.CustomImages = v
	case AdmitGPU:
		a.GPU = v
	default:
		return false
	}
	return true
}

// Has reports whether a holds flag; an unknown flag is never held.
func Has(a api.Admission, flag string) bool {
	switch flag {
	case AdmitManaged:
		return a.ManagedEnvironment
	case AdmitPreview:
		return a.Preview
	case AdmitImages:
		return a.CustomImages
	case AdmitGPU:
		return a.GPU
	}
	return false
}

// Effective is what a team may use: the admin team everything, whatever
// is stored.
func Effective(t api.Team) api.Admission {
	if t.Name == AdminTeam {
		return All
	}
	return t.Admission
}

// Refusal is the error for team t lacking flag: permission_denied naming
// the flag and the command an admin runs to grant it; nil when t holds it.
func Refusal(t api.Team, flag string) error {
	if Has(Effective(t), flag) {
		return nil
	}
	return &api.Error{
		Code: api.CodePermissionDenied,
		Message: fmt.Sprintf("team %s lacks the %q admission; ask an admin of this server to run: cove teams admit %s --%s",
			t.Name, flag, t.Name, strings.ReplaceAll(flag, "_", "-")),
		Details: map[string]any{"admission": flag, "team": t.Name},
	}
}

// RequireAdmission refuses a team that lacks flag (Refusal), as the team
// is stored now.
func (s *Service) RequireAdmission(ctx context.Context, teamID, flag string) error {
	t, err := s.st.GetTeam(ctx, teamID)
	if err != nil {
		return err
	}
	return Refusal(t, flag)
}

// CheckAdmissionChange refuses to take a flag from the admin team, which
// has every one (a team's update).
func CheckAdmissionChange(t api.Team, a *api.Admission) error {
	if a != nil && t.Name == AdminTeam && *a != All {
		return invalid("the admin team has every admission flag; they cannot be taken from it")
	}
	return nil
}

// TeamMe describes the principal's own team: its admission and limits.
func (s *Service) TeamMe(ctx context.Context, p Principal) (api.TeamMe, error) {
	t, err := s.st.GetTeam(ctx, p.Team.ID)
	if err != nil {
		return api.TeamMe{}, err
	}
	t.Admission = Effective(t)
	var flags []string
	for _, f := range AdmissionFlags {
		if Has(t.Admission, f) {
			flags = append(flags, f)
		}
	}
	return api.TeamMe{
		Team: t, Admin: p.Admin(), Admitted: slices.Clip(append([]string{}, flags...)),
		Limits: s.cfg.Limits,
	}, nil
}
