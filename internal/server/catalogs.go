package server

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/imagecatalog"
	"github.com/cove-dev/cove/internal/control/previews"
	"github.com/cove-dev/cove/internal/control/templatecatalog"
	"github.com/cove-dev/cove/internal/node"
)

// The image catalog, the templates' catalog and the previews are
// services of their own (internal/control/…). This file builds them over
// the core and keeps the small calls by which the rest of the package
// reaches them.

// newFeatureServices builds the image catalog, the templates' catalog and
// the previews over the server (New).
func (s *Server) newFeatureServices() {
	now := func() time.Time { return s.now() }
	core := featureCore{s}
	s.images = imagecatalog.New(imagecatalog.Config{
		Templates: s.cfg.Templates, MaxBytesPerTeam: s.cfg.MaxImageBytesPerTeam,
		AdminTeam: AdminTeam, AdmitFlag: admitImages, MaxCommandBytes: maxCommandSize,
	}, imagecatalog.Deps{
		Store: s.store, Admission: core, Events: core, Uploads: core, Workloads: core, Validate: core,
		Log: s.log, Now: now,
	})
	s.templates = templatecatalog.New(templatecatalog.Config{
		Templates: s.cfg.Templates, ManagedFlag: admitManaged, ImagesFlag: admitImages,
	}, s.store, s.images, core)
	s.previews = previews.New(previews.Config{MaxPerSandbox: s.cfg.MaxPreviewsPerSandbox, AdmitFlag: admitPreview},
		previews.Deps{Store: s.store, Lifecycle: core, Admission: core, Log: s.log, Now: now})
}

// Images is the image catalog (the images' API, the node's importer).
func (s *Server) Images() *imagecatalog.Catalog { return s.images }

// Templates is the templates' catalog (the templates' API, their states).
func (s *Server) Templates() *templatecatalog.Catalog { return s.templates }

// Previews is the previews' service (their API and their traffic).
func (s *Server) Previews() *previews.Service { return s.previews }

// TemplatesChanged tells the server that a template's state changed (a
// build ended), so that the warm pool fills at once.
func (s *Server) TemplatesChanged() {
	select {
	case s.refill <- struct{}{}:
	default:
	}
}

// featureCore is what the feature services ask of the core.
type featureCore struct{ s *Server }

var (
	_ imagecatalog.Admission    = featureCore{}
	_ imagecatalog.Events       = featureCore{}
	_ imagecatalog.Uploads      = featureCore{}
	_ imagecatalog.Workloads    = featureCore{}
	_ imagecatalog.Validator    = featureCore{}
	_ templatecatalog.Admission = featureCore{}
	_ previews.Lifecycle        = featureCore{}
)

func (c featureCore) RequireAdmission(ctx context.Context, teamID, flag string) error {
	return c.s.requireAdmission(ctx, teamID, flag)
}

func (c featureCore) Admits(t api.Team, flag string) bool {
	return hasAdmission(effectiveAdmission(t), flag)
}

func (c featureCore) Emit(ctx context.Context, teamID, typ string, data map[string]any) {
	c.s.emit(ctx, teamID, typ, "", "", data)
}

func (c featureCore) SpoolImage(ctx context.Context, teamID string, body io.Reader, max int64) (*os.File, func(), error) {
	u, err := c.s.beginUpload(teamID, uploadImage)
	if err != nil {
		return nil, nil, err
	}
	sp, err := c.s.spool(ctx, u, body, max, "", nil, "image archive")
	if err != nil {
		u.end()
		return nil, nil, err
	}
	return sp.f, func() { sp.Close(); u.end() }, nil
}

func (c featureCore) RefuseImageDelete(ctx context.Context, img api.Image, owner string) error {
	return c.s.refuseImageOfWorkloads(ctx, img, owner)
}

func (c featureCore) Name(name string) error { return validateName(name) }

func (c featureCore) Resources(r *api.ResourcesRequest) error {
	_, err := c.s.cfg.resolveResources(r)
	return err
}

func (c featureCore) Policy(field string, allow []string) ([]string, error) {
	return checkPolicy(field, allow)
}

func (c featureCore) LockSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, func(), error) {
	sb, o, err := c.s.lockSandbox(ctx, teamID, ref)
	if err != nil {
		return sb, nil, err
	}
	return sb, o.mu.Unlock, nil
}

func (c featureCore) GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	return c.s.GetSandbox(ctx, teamID, ref)
}

func (c featureCore) LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error) {
	return c.s.LiveSandbox(ctx, teamID, ref, wake)
}

func (c featureCore) Touch(sandboxID string) { c.s.touch(sandboxID) }

// The core's calls into the image catalog.

func (s *Server) loadImages(ctx context.Context) error { return s.images.Load(ctx) }

func (s *Server) image(teamID, template string) (api.Image, bool) {
	return s.images.Image(teamID, template)
}

func (s *Server) useImage(ctx context.Context, teamID string, req *api.CreateSandboxRequest) (*api.Image, func(), error) {
	return s.images.Use(ctx, teamID, req)
}

func (s *Server) nodeTemplate(teamID, name string) string { return s.images.NodeTemplate(teamID, name) }

func (s *Server) defaultUser(sb api.Sandbox) node.User { return s.images.DefaultUser(sb) }

func (s *Server) fileOwnerIn(sb api.Sandbox, user string, uid, gid int) (int, int) {
	return s.images.FileOwnerIn(sb, user, uid, gid)
}

func (s *Server) asSeenBy(ctx context.Context, t api.Team, img api.Image) (api.Image, error) {
	return s.images.AsSeenBy(ctx, t, img)
}

func imageVisible(t api.Team, img api.Image) bool { return imagecatalog.VisibleTo(AdminTeam, t, img) }

func (s *Server) teamImageBytes(ctx context.Context, teamID string) (int64, error) {
	return s.images.TeamBytes(ctx, teamID)
}

func qualifiedImage(team, name string) string { return imagecatalog.Qualified(team, name) }

func checkImageLimits(img *api.Image, res api.Resources) error {
	return imagecatalog.CheckLimits(img, res, MinMemoryMiB, MinDiskMiB)
}

func imageCommand(img api.Image, req api.CreateCommandRequest, user string, u node.User, env map[string]string) (node.User, map[string]string, error) {
	return imagecatalog.Command(img, req, user, u, env)
}

// The core's calls into the templates' catalog and the previews.

func (s *Server) checkTemplate(name string) error { return s.templates.Check(name) }

func (s *Server) templateReady(name string) bool { return s.templates.Ready(name) }

func (s *Server) publishAll(ctx context.Context) error { return s.previews.PublishAll(ctx) }
