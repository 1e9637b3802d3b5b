package store

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
)

// Previews persists the ports that sandboxes publish (internal/preview
// routes requests to them). A sandbox publishes a port at most once:
// CreatePreview answers CodeConflict for a second preview of the same
// sandbox and port.
type Previews interface {
	CreatePreview(ctx context.Context, p Preview) error
	// GetPreview finds a preview of the team; teamID "" finds it in any
	// team (for routing, which learns the team from the preview).
	GetPreview(ctx context.Context, teamID, id string) (Preview, error)
	// PreviewByPort finds the preview of a sandbox's port.
	PreviewByPort(ctx context.Context, sandboxID string, port int) (Preview, error)
	// ListPreviews lists a sandbox's previews, oldest first.
	ListPreviews(ctx context.Context, sandboxID string) ([]Preview, error)
	// ListAllPreviews lists the previews of every sandbox, for the
	// control plane to publish their ports again after a restart.
	ListAllPreviews(ctx context.Context) ([]Preview, error)
	DeletePreview(ctx context.Context, teamID, id string) error
}

// Preview is a stored preview: the token only as its hash.
type Preview struct {
	ID         string
	TeamID     string
	SandboxID  string
	Port       int
	Visibility string
	Wake       bool
	TokenHash  string
	CreatedAt  time.Time
	// Version is the row's version (see Store): 1 as created.
	Version int64
}

// Admissions changes what a team may use (api.Admission).
type Admissions interface {
	SetTeamAdmission(ctx context.Context, teamID string, a api.Admission) error
}
