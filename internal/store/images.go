package store

import (
	"context"

	"github.com/cove-dev/cove/api"
)

// Images persists imported images (internal/images stores their trees).
// Names are unique within a team (two teams may each have an image called
// x): CreateImage answers CodeConflict for a name the team uses. Several
// images may share a digest (one stored tree).
type Images interface {
	CreateImage(ctx context.Context, img api.Image) error
	// GetImage finds an image by ID; GetImageByName by its team and name.
	// Visibility to a team is the control plane's to decide.
	GetImage(ctx context.Context, id string) (api.Image, error)
	GetImageByName(ctx context.Context, teamID, name string) (api.Image, error)
	// ListImages lists every image, by name.
	ListImages(ctx context.Context) ([]api.Image, error)
	// UpdateImage replaces an image's settings (defaults, limits,
	// admission, examples, updated_at).
	UpdateImage(ctx context.Context, img api.Image) error
	DeleteImage(ctx context.Context, id string) error
	// ImagesWithDigest counts the images stored as digest.
	ImagesWithDigest(ctx context.Context, digest string) (int, error)
	// TemplateInUse reports whether a sandbox that is neither terminated
	// nor failed names template: a sandbox of team teamID that names it
	// so, or any sandbox that names it as qualified (TEAM/NAME, how other
	// teams name a team's image).
	TemplateInUse(ctx context.Context, teamID, template, qualified string) (bool, error)
}
