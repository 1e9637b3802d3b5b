package server

import (
	"context"

	"github.com/cove-dev/cove/api"
)

// TemplateStates is what the control plane reads of its templates' state
// (internal/templates): building, ready or failed, and self-tests.
type TemplateStates interface {
	Get(name string) (api.Template, bool)
	List() []api.Template
}

// templateRetryS is the Retry-After of a create on a template that is
// still building.
const templateRetryS = 10

// SetTemplateStates connects the templates' state; call it before serving.
// Without it every configured template counts as ready.
func (s *Server) SetTemplateStates(t TemplateStates) { s.tmplStates = t }

// TemplatesChanged tells the server that a template's state changed (a
// build ended), so that the warm pool fills at once.
func (s *Server) TemplatesChanged() {
	select {
	case s.refill <- struct{}{}:
	default:
	}
}

// checkTemplate refuses a template that is not ready: 503 with
// Retry-After while it builds, with its progress; 503 with the reason when
// its build failed.
func (s *Server) checkTemplate(name string) error {
	if s.tmplStates == nil {
		return nil
	}
	t, ok := s.tmplStates.Get(name)
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
			Details: map[string]any{"template": name, "status": t.Status, "progress": t.Progress, "retry_after_s": templateRetryS}}
	case api.TemplateFailed:
		return &api.Error{Code: api.CodeUnavailable, Message: "template " + name + " could not be built: " + t.Reason + "; the operator must fix the build and restart cove serve",
			Details: map[string]any{"template": name, "status": t.Status, "reason": t.Reason}}
	}
	return nil
}

func (s *Server) templateReady(name string) bool { return s.checkTemplate(name) == nil }

// ListTemplates lists the templates the team may use, with their state.
func (s *Server) ListTemplates(ctx context.Context, teamID string) (api.List[api.Template], error) {
	t, err := s.store.GetTeam(ctx, teamID)
	if err != nil {
		return api.List[api.Template]{}, err
	}
	adm := effectiveAdmission(t)
	items := []api.Template{}
	for _, name := range s.cfg.Templates {
		tmpl := api.Template{Name: name, Kind: "managed", Status: api.TemplateReady}
		if s.tmplStates != nil {
			if st, ok := s.tmplStates.Get(name); ok {
				tmpl = st
			}
		}
		if !hasAdmission(adm, s.templateAdmission(teamID, name)) {
			continue
		}
		items = append(items, tmpl)
	}
	if s.importer != nil && hasAdmission(adm, admitImages) {
		imgs, err := s.store.ListImages(ctx)
		if err != nil {
			return api.List[api.Template]{}, err
		}
		for _, img := range imgs {
			if imageVisible(t, img) {
				img, err := s.asSeenBy(ctx, t, img)
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
func (s *Server) TemplateHealth() map[string]string {
	out := map[string]string{}
	for _, name := range s.cfg.Templates {
		out[name] = api.TemplateReady
		if s.tmplStates != nil {
			if st, ok := s.tmplStates.Get(name); ok {
				out[name] = st.Status
			}
		}
	}
	return out
}
