package store

import (
	"context"

	"github.com/cove-dev/cove/api"
)

// Images persists imported images (internal/images stores their trees).
// Names are unique: CreateImage and a rename answer CodeConflict for a
// name in use. Several names may share a digest (one stored tree).
type Images interface {
	CreateImage(ctx context.Context, img api.Image) error
	// GetImage finds an image by ID; GetImageByName by name. Visibility to
	// a team is the control plane's to decide.
	GetImage(ctx context.Context, id string) (api.Image, error)
	GetImageByName(ctx context.Context, name string) (api.Image, error)
	// ListImages lists every image, by name.
	ListImages(ctx context.Context) ([]api.Image, error)
	// UpdateImage replaces an image's settings (defaults, limits,
	// admission, examples, updated_at).
	UpdateImage(ctx context.Context, img api.Image) error
	DeleteImage(ctx context.Context, id string) error
	// ImagesWithDigest counts the images stored as digest.
	ImagesWithDigest(ctx context.Context, digest string) (int, error)
	// TemplateInUse reports whether a sandbox that is neither terminated
	// nor failed names template.
	TemplateInUse(ctx context.Context, template string) (bool, error)
}
