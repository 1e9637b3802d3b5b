package httpapi

import "log/slog"

// newHandler is New over the fake, with the fake as each service, as
// internal/service sets the real ones.
func newHandler(f *fakeControlPlane, log *slog.Logger) *Handler {
	h := New(log)
	h.Teams, h.Idempotency, h.Secrets = f, f, &f.secrets
	h.Files, h.Assets = f, f
	h.ImageService, h.TemplateService, h.PreviewService = f, f, f
	h.Sandboxes, h.Commands, h.Events, h.Workloads = f, f, f, f
	h.Metering, h.Observations = f, f
	return h
}

var (
	_ Teams       = (*fakeControlPlane)(nil)
	_ Idempotency = (*fakeControlPlane)(nil)
	_ Secrets     = (*fakeSecrets)(nil)
)
