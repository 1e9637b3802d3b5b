// Package templatecatalog is the control plane's view of the templates a
// sandbox may start from: the server's own (managed) templates with the
// state of their builds (internal/templates), refused while they build or
// after their build failed, and the list each team may use, its imported
// images included.
package templatecatalog

import (
	"context"

	"github.com/cove-dev/cove/api"
)

// States is what the control plane reads of its templates' state
// (internal/templates): building, ready or failed, and self-tests.
type States interface {
	Get(name string) (api.Template, bool)
	List() []api.Template
}

// Store is what the catalog reads of the store.
type Store interface {
	GetTeam(ctx context.Context, id string) (api.Team, error)
	ListImages(ctx context.Context) ([]api.Image, error)
}

// Images is what the catalog asks of the image catalog.
type Images interface {
	// Enabled says whether the server imports images.
	Enabled() bool
	// Image finds the image that team teamID names template.
	Image(teamID, template string) (api.Image, bool)
	// Visible says whether team t may see img.
	Visible(t api.Team, img api.Image) bool
	// AsSeenBy fills img.Template with team t's name for it.
	AsSeenBy(ctx context.Context, t api.Team, img api.Image) (api.Image, error)
}

// Admission says whether a team holds an admission flag.
type Admission interface {
	Admits(t api.Team, flag string) bool
}

// Config is the catalog's part of the server's configuration.
type Config struct {
	// Templates are the server's own templates, by name.
	Templates []string
	// ManagedFlag is the admission the server's own templates need;
	// ImagesFlag the one imported images need.
	ManagedFlag, ImagesFlag string
}

// RetryAfterS is the Retry-After of a create on a template that is still
// building.
const RetryAfterS = 10

// Catalog answers which templates are ready and which a team may use.
type Catalog struct {
	cfg       Config
	store     Store
	images    Images
	admission Admission
	// states is set before serving, then only read; nil: every
	// configured template counts as ready.
	states States
}

// New returns the templates' catalog.
func New(cfg Config, st Store, images Images, adm Admission) *Catalog {
	return &Catalog{cfg: cfg, store: st, images: images, admission: adm}
}

// SetStates connects the templates' state; call it before serving.
func (c *Catalog) SetStates(s States) { c.states = s }

// Check refuses a template that is not ready: 503 with Retry-After while
// it builds, with its progress; 503 with the reason when its build
// failed. Templates it has no state of (images) pass.
func (c *Catalog) Check(name string) error {
	if c.states == nil {
		return nil
	}
	t, ok := c.states.Get(name)
	if !ok {
		return nil
	}
	switch t.Status {
	case api.TemplateBuilding:
		msg := "template " + name + " is still being built; try again shortly"
		if t.Progress != "" {
			msg += " (" + t.Progress + ")"
		}
		return &api.Error{Code: api.CodeUnavailable, Message: msg,
			Details: map[string]any{"template": name, "status": t.Status, "progress": t.Progress, "retry_after_s": RetryAfterS}}
	case api.TemplateFailed:
		return &api.Error{Code: api.CodeUnavailable, Message: "template " + name + " could not be built: " + t.Reason + "; the operator must fix the build and restart cove serve",
			Details: map[string]any{"template": name, "status": t.Status, "reason": t.Reason}}
	}
	return nil
}

// Ready says whether Check lets the template through.
func (c *Catalog) Ready(name string) bool { return c.Check(name) == nil }

// Admission is the flag a template needs: every template the server
// ships (the managed image and the images in its images dir) is a managed
// environment; an imported image (as team teamID names it) needs
// custom_images.
func (c *Catalog) Admission(teamID, tmpl string) string {
	if _, ok := c.images.Image(teamID, tmpl); ok {
		return c.cfg.ImagesFlag
	}
	return c.cfg.ManagedFlag
}

// ListTemplates lists the templates the team may use, with their state.
func (c *Catalog) ListTemplates(ctx context.Context, teamID string) (api.List[api.Template], error) {
	t, err := c.store.GetTeam(ctx, teamID)
	if err != nil {
		return api.List[api.Template]{}, err
	}
	items := []api.Template{}
	for _, name := range c.cfg.Templates {
		tmpl := api.Template{Name: name, Kind: "managed", Status: api.TemplateReady}
		if c.states != nil {
			if st, ok := c.states.Get(name); ok {
				tmpl = st
			}
		}
		if !c.admission.Admits(t, c.Admission(teamID, name)) {
			continue
		}
		items = append(items, tmpl)
	}
	if c.images.Enabled() && c.admission.Admits(t, c.cfg.ImagesFlag) {
		imgs, err := c.store.ListImages(ctx)
		if err != nil {
			return api.List[api.Template]{}, err
		}
		for _, img := range imgs {
			if c.images.Visible(t, img) {
				img, err := c.images.AsSeenBy(ctx, t, img)
				if err != nil {
					return api.List[api.Template]{}, err
				}
				items = append(items, api.Template{Name: img.Template, Kind: "image", Status: api.TemplateReady, Qualified: true})
			}
		}
	}
	return api.List[api.Template]{Items: items}, nil
}

// TemplateHealth is every template's status, for GET /healthz.
func (c *Catalog) TemplateHealth() map[string]string {
	out := map[string]string{}
	for _, name := range c.cfg.Templates {
		out[name] = api.TemplateReady
		if c.states != nil {
			if st, ok := c.states.Get(name); ok {
				out[name] = st.Status
			}
		}
	}
	return out
}
