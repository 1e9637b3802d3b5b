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
	// prv_…
	ID         string `json:"id"`
	SandboxID  string `json:"sandbox_id"`
	Port       int    `json:"port"`
	Visibility string `json:"visibility" schema:"enum=private,public"`
	Wake       bool   `json:"wake"`
	// <scheme>://<port>-<sandbox id>.<preview domain>/: every preview is an
	// origin of its own, never the API's host
	URL       string    `json:"url"`
	CreatedAt time.Time `json:"created_at"`
	// A private preview's token, shown once at creation; send it as
	// Cove-Preview-Token.
	Token string `json:"token,omitempty"`
	// Link is a one-time URL that sets the token as a cookie of the
	// preview's host, for a browser; shown once, when a private preview
	// is created, and valid 10 minutes.
	Link string `json:"link,omitempty"`
}

// CreatePreviewRequest is the body of POST /v1/sandboxes/{ref}/previews.
type CreatePreviewRequest struct {
	Port int `json:"port" schema:"minimum=1 maximum=65535"`
	// Visibility is private (the default) or public.
	Visibility string `json:"visibility,omitempty" schema:"enum=private,public default=private"`
	// Wake lets a request to the preview wake an asleep sandbox.
	Wake bool `json:"wake,omitempty"`
}
