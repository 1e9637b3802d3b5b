package api

import "time"

// Preview visibilities.
const (
	// VisibilityPrivate previews need the preview's token: a header, or the
	// cookie a one-time link sets.
	VisibilityPrivate = "private"
	// VisibilityPublic previews need nothing.
	VisibilityPublic = "public"
)

// PreviewTokenHeader carries a private preview's token on a request to it.
const PreviewTokenHeader = "Cove-Preview-Token"

// Preview publishes one TCP port of a sandbox over HTTP at
// <port>-<sandbox id>.<preview domain>, an origin of its own (never the
// API's host, whose origin is the console's).
type Preview struct {
	ID         string    `json:"id"`
	SandboxID  string    `json:"sandbox_id"`
	Port       int       `json:"port"`
	Visibility string    `json:"visibility"`
	Wake       bool      `json:"wake"`
	URL        string    `json:"url"`
	CreatedAt  time.Time `json:"created_at"`
	// Token is shown once, when a private preview is created.
	Token string `json:"token,omitempty"`
	// Link is a one-time URL that sets the token as a cookie of the
	// preview's host, for a browser; shown once, when a private preview
	// is created.
	Link string `json:"link,omitempty"`
}

// CreatePreviewRequest is the body of POST /v1/sandboxes/{ref}/previews.
type CreatePreviewRequest struct {
	Port int `json:"port"`
	// Visibility is private (the default) or public.
	Visibility string `json:"visibility,omitempty"`
	// Wake lets a request to the preview wake an asleep sandbox.
	Wake bool `json:"wake,omitempty"`
}
