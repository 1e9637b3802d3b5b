// Package imagecatalog is the control plane's catalog of imported images:
// import (through the node's importer), list, settings and delete; each
// team's names for them and who may see them; the per-team byte cap; and
// the refusal to delete an image that a sandbox or a queued workload
// still uses. It resolves the templates that name images for the
// lifecycle core (Use, Image, NodeTemplate, DefaultUser).
package imagecatalog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// Importer stores the trees of imported images on the node
// (internal/images): each once, named by its manifest digest.
type Importer interface {
	// StageImage reads, verifies and unpacks an image archive (the
	// catalog gives a whole, private *os.File, which the importer may
	// read in place) into a private staging place, holding no lock that
	// other imports, deletes or sandboxes wait for; the image it returns
	// has Digest, SizeBytes and Config set, and handle names it for
	// CommitImage or DiscardImage, one of which the caller must call.
	StageImage(ctx context.Context, r io.Reader) (img api.Image, handle string, err error)
	// CommitImage stores a staged tree as its digest's, or drops it when
	// that digest is stored already; created says the tree is new.
	CommitImage(ctx context.Context, handle string) (created bool, err error)
	// DiscardImage drops a staged tree.
	DiscardImage(handle string)
	// RemoveImage deletes the tree of digest.
	RemoveImage(ctx context.Context, digest string) error
}

// Store is what the catalog reads and writes of the store.
type Store interface {
	CreateImage(ctx context.Context, img api.Image) error
	GetImage(ctx context.Context, id string) (api.Image, error)
	GetImageByName(ctx context.Context, teamID, name string) (api.Image, error)
	ListImages(ctx context.Context) ([]api.Image, error)
	UpdateImage(ctx context.Context, img api.Image) error
	DeleteImage(ctx context.Context, id string) error
	ImagesWithDigest(ctx context.Context, digest string) (int, error)
	TemplateInUse(ctx context.Context, teamID, template, qualified string) (bool, error)
	TemplateSnapshots(ctx context.Context, teamID, template, qualified string) ([]store.Snapshot, error)
	GetTeam(ctx context.Context, id string) (api.Team, error)
	GetTeamByName(ctx context.Context, name string) (api.Team, error)
}

// Admission checks a team's admission flags.
type Admission interface {
	RequireAdmission(ctx context.Context, teamID, flag string) error
}

// Events appends to a team's event log.
type Events interface {
	Emit(ctx context.Context, teamID, typ string, data map[string]any)
}

// Uploads receives an image archive into a private file, at the sender's
// pace, counted against the team's image bytes while it arrives. release
// removes the file and ends the upload's count.
type Uploads interface {
	SpoolImage(ctx context.Context, teamID string, body io.Reader, max int64) (f *os.File, release func(), err error)
}

// Workloads refuses deleting an image that a workload which has not ended
// names (by name in its team, by qualified, TEAM/NAME, in others).
type Workloads interface {
	// RefuseImageDelete answers conflict while a workload uses img,
	// which team owner owns.
	RefuseImageDelete(ctx context.Context, img api.Image, owner string) error
}

// Validator checks settings against the server's own rules.
type Validator interface {
	// Name checks an image's name as any resource name.
	Name(name string) error
	// Resources checks resources against the server's bounds.
	Resources(r *api.ResourcesRequest) error
	// Policy checks and normalizes a network allow list.
	Policy(field string, allow []string) ([]string, error)
}

// Config is the catalog's part of the server's configuration.
type Config struct {
	// Templates are the server's own templates: no image takes their names.
	Templates []string
	// MaxBytesPerTeam caps the unpacked trees of a team's images.
	MaxBytesPerTeam int64
	// AdminTeam is the name of the team that sees and manages every image.
	AdminTeam string
	// AdmitFlag is the admission a team needs to import and use images.
	AdmitFlag string
	// MaxCommandBytes bounds each example command.
	MaxCommandBytes int
}

// Deps are the services the catalog calls.
type Deps struct {
	Store     Store
	Admission Admission
	Events    Events
	Uploads   Uploads
	Workloads Workloads
	Validate  Validator
	Log       *slog.Logger
	// Now is the clock (UTC).
	Now func() time.Time
}

// Catalog is the image catalog. Its memory of the images, by the names
// sandboxes give them as templates, is filled at Load (or the first
// use) and kept by the calls that change images: the node templates of
// sandboxes are named by digest, and the spec builder has no store at
// hand.
//
// Image names are a team's own: its sandboxes name its image NAME, and
// those of other teams that may see it name it TEAM/NAME (the owner
// team's name; team names are unique and never change). A template is
// therefore resolved against the team of the sandbox that names it.
type Catalog struct {
	cfg  Config
	deps Deps
	// importer is set before serving, then only read; nil: no images.
	importer Importer

	// use orders the calls that use an image against its deletion:
	// creates of a sandbox of an image hold it for reading until the
	// sandbox is stored; imports and deletes hold it for writing.
	use sync.RWMutex

	mu     sync.Mutex
	loaded bool
	// byRef holds each image twice: under ownKey and under its qualified
	// name (the two never collide: team IDs and names hold no '/', image
	// names no ':').
	byRef map[string]api.Image
	// teams are the names of the teams that own images, by ID.
	teams map[string]string
}

// New returns a catalog; it imports nothing until SetImporter.
func New(cfg Config, d Deps) *Catalog {
	return &Catalog{cfg: cfg, deps: d}
}

// SetImporter connects the node's importer; call it before serving.
func (c *Catalog) SetImporter(im Importer) { c.importer = im }

// Enabled says whether this server imports images.
func (c *Catalog) Enabled() bool { return c.importer != nil }

func ownKey(teamID, name string) string { return teamID + ":" + name }

// Qualified is how other teams name an image: TEAM/NAME.
func Qualified(team, name string) string { return team + "/" + name }

// Load fills the catalog's memory from the store once.
func (c *Catalog) Load(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded {
		return nil
	}
	imgs, err := c.deps.Store.ListImages(ctx)
	if err != nil {
		return err
	}
	c.byRef = map[string]api.Image{}
	c.teams = map[string]string{}
	for _, img := range imgs {
		team, ok := c.teams[img.TeamID]
		if !ok {
			t, err := c.deps.Store.GetTeam(ctx, img.TeamID)
			if err != nil {
				return fmt.Errorf("owner of image %s: %w", img.ID, err)
			}
			team = t.Name
			c.teams[img.TeamID] = team
		}
		c.byRef[ownKey(img.TeamID, img.Name)] = img
		c.byRef[Qualified(team, img.Name)] = img
	}
	c.loaded = true
	return nil
}

// Image returns the imported image that team teamID's sandboxes name
// template: its own image NAME, or another team's TEAM/NAME. Whether the
// team may use it is checked where a sandbox is created (Use).
func (c *Catalog) Image(teamID, template string) (api.Image, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := template
	if !strings.Contains(template, "/") {
		key = ownKey(teamID, template)
	}
	img, ok := c.byRef[key]
	return img, ok
}

// set puts img, owned by team ownerName, into the memory, or takes it
// out (gone).
func (c *Catalog) set(img api.Image, ownerName string, gone bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		return // Load reads it from the store
	}
	own, q := ownKey(img.TeamID, img.Name), Qualified(ownerName, img.Name)
	if gone {
		delete(c.byRef, own)
		delete(c.byRef, q)
		return
	}
	c.teams[img.TeamID] = ownerName
	c.byRef[own] = img
	c.byRef[q] = img
}

// ownerName is the name of the team that owns img.
func (c *Catalog) ownerName(ctx context.Context, img api.Image) (string, error) {
	c.mu.Lock()
	name, ok := c.teams[img.TeamID]
	c.mu.Unlock()
	if ok {
		return name, nil
	}
	t, err := c.deps.Store.GetTeam(ctx, img.TeamID)
	if err != nil {
		return "", fmt.Errorf("owner of image %s: %w", img.ID, err)
	}
	return t.Name, nil
}

// AsSeenBy fills img.Template: how team t names the image as a template.
func (c *Catalog) AsSeenBy(ctx context.Context, t api.Team, img api.Image) (api.Image, error) {
	if img.TeamID == t.ID {
		img.Template = img.Name
		return img, nil
	}
	owner, err := c.ownerName(ctx, img)
	if err != nil {
		return api.Image{}, err
	}
	img.Template = Qualified(owner, img.Name)
	return img, nil
}

// NodeTemplate is the node's name of the template a sandbox (or
// workload) of team teamID names: an imported image's tree is named by
// its digest ("sha256-…"); other templates by their names.
func (c *Catalog) NodeTemplate(teamID, name string) string {
	if img, ok := c.Image(teamID, name); ok {
		return strings.Replace(img.Digest, ":", "-", 1)
	}
	return name
}
