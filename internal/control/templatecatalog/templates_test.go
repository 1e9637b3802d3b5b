package templatecatalog_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/templatecatalog"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/internal/templates"
)

// images fakes the image catalog: every stored image is visible to every
// team, named TEAM/NAME.
type images struct{ enabled bool }

func (i images) Enabled() bool                                   { return i.enabled }
func (i images) Image(teamID, template string) (api.Image, bool) { return api.Image{}, false }
func (i images) Visible(t api.Team, img api.Image) bool          { return true }
func (i images) AsSeenBy(ctx context.Context, t api.Team, img api.Image) (api.Image, error) {
	img.Template = "owner/" + img.Name
	return img, nil
}

// admission admits what a team's admission says, by flag.
type admission struct{}

func (admission) Admits(t api.Team, flag string) bool {
	switch flag {
	case "managed_environment":
		return t.Admission.ManagedEnvironment
	case "custom_images":
		return t.Admission.CustomImages
	}
	return false
}

// TestCheck: a create on a template that builds is refused with 503, a
// retry and its progress; on one whose build failed, with 503 and the
// reason; a ready one, or one the states do not know (an image), passes.
func TestCheck(t *testing.T) {
	reg := templates.New()
	reg.Set(api.Template{Name: "building", Status: api.TemplateBuilding, Progress: "step 3 of 9"})
	reg.Set(api.Template{Name: "broken", Status: api.TemplateFailed, Reason: "no disk"})
	reg.Set(api.Template{Name: "ready", Status: api.TemplateReady})
	c := templatecatalog.New(templatecatalog.Config{Templates: []string{"building", "broken", "ready"}}, nil, images{}, admission{})
	c.SetStates(reg)
	tests := []struct {
		name    string
		want    api.Code
		details map[string]any
	}{
		{"building", api.CodeUnavailable, map[string]any{"retry_after_s": templatecatalog.RetryAfterS, "progress": "step 3 of 9"}},
		{"broken", api.CodeUnavailable, map[string]any{"reason": "no disk"}},
		{"ready", "", nil},
		{"team-a/tools", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Check(tt.name)
			if got := api.ErrorCode(err); got != tt.want || c.Ready(tt.name) != (tt.want == "") {
				t.Fatalf("check %v (%s), want %q", err, got, tt.want)
			}
			e, _ := err.(*api.Error)
			for k, v := range tt.details {
				if e == nil || e.Details[k] != v {
					t.Errorf("details %v, want %s=%v", e, k, v)
				}
			}
		})
	}
	if h := c.TemplateHealth(); h["building"] != api.TemplateBuilding || h["ready"] != api.TemplateReady {
		t.Errorf("health %v", h)
	}
}

// TestListTemplates: a team lists the server's templates only with the
// managed_environment admission, and the images it may see only with
// custom_images (and a server that imports images).
func TestListTemplates(t *testing.T) {
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	owner := api.Team{ID: id.New("team"), Name: "owner", CreatedAt: time.Now().UTC()}
	if err := st.CreateTeam(ctx, owner); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := st.CreateImage(ctx, api.Image{ID: id.New("img"), Name: "tools", TeamID: owner.ID, Digest: "sha256:1", CreatedAt: now, UpdatedAt: now,
		Admission: api.ImageAdmission{Mode: api.ImageAdmitAll, Teams: []string{}}, Examples: []string{}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		admission api.Admission
		imports   bool
		want      []string
	}{
		{"managed", api.Admission{ManagedEnvironment: true}, true, []string{"managed"}},
		{"images", api.Admission{CustomImages: true}, true, []string{"owner/tools"}},
		{"both", api.Admission{ManagedEnvironment: true, CustomImages: true}, true, []string{"managed", "owner/tools"}},
		{"no importer", api.Admission{ManagedEnvironment: true, CustomImages: true}, false, []string{"managed"}},
		{"neither", api.Admission{}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tm := api.Team{ID: id.New("team"), Name: "team-" + strings.ReplaceAll(tt.name, " ", "-"), CreatedAt: now, Admission: tt.admission}
			if err := st.CreateTeam(ctx, tm); err != nil {
				t.Fatal(err)
			}
			c := templatecatalog.New(templatecatalog.Config{Templates: []string{"managed"}, ManagedFlag: "managed_environment", ImagesFlag: "custom_images"},
				st, images{enabled: tt.imports}, admission{})
			l, err := c.ListTemplates(ctx, tm.ID)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, i := range l.Items {
				got = append(got, i.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("listed %q, want %q", got, tt.want)
			}
		})
	}
}
