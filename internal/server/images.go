package server

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
)

// ImageImporter stores the trees of imported images on the node
// (internal/images): each once, named by its manifest digest.
type ImageImporter interface {
	// StageImage reads, verifies and unpacks an image archive (the
	// server gives a whole, private *os.File, which the importer may read
	// in place) into a private staging place, holding no lock that other
	// imports, deletes or sandboxes wait for; the image it returns has
	// Digest, SizeBytes and Config set, and handle names it for
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

// SetImages connects the image importer; call it before serving. Without
// it the server imports no images.
func (s *Server) SetImages(im ImageImporter) { s.importer = im }

// imageSet is the control plane's memory of its imported images by the
// names sandboxes give them as templates: the node templates of their
// sandboxes are named by digest, and spec() has no store at hand. It is
// filled at Recover (or the first use) and kept by the calls that change
// images.
//
// Image names are a team's own: its sandboxes name its image NAME, and
// those of other teams that may see it name it TEAM/NAME (the owner
// team's name; team names are unique and never change). A template is
// therefore resolved against the team of the sandbox that names it.
//
// use orders the calls that use an image against its deletion: creates
// of a sandbox of an image hold it for reading until the sandbox is
// stored; imports and deletes hold it for writing.
type imageSet struct {
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

func ownKey(teamID, name string) string { return teamID + ":" + name }

// qualifiedImage is how other teams name an image: TEAM/NAME.
func qualifiedImage(team, name string) string { return team + "/" + name }

// loadImages fills the image set from the store once.
func (s *Server) loadImages(ctx context.Context) error {
	s.images.mu.Lock()
	defer s.images.mu.Unlock()
	if s.images.loaded {
		return nil
	}
	imgs, err := s.store.ListImages(ctx)
	if err != nil {
		return err
	}
	s.images.byRef = map[string]api.Image{}
	s.images.teams = map[string]string{}
	for _, img := range imgs {
		team, ok := s.images.teams[img.TeamID]
		if !ok {
			t, err := s.store.GetTeam(ctx, img.TeamID)
			if err != nil {
				return fmt.Errorf("owner of image %s: %w", img.ID, err)
			}
			team = t.Name
			s.images.teams[img.TeamID] = team
		}
		s.images.byRef[ownKey(img.TeamID, img.Name)] = img
		s.images.byRef[qualifiedImage(team, img.Name)] = img
	}
	s.images.loaded = true
	return nil
}

// image returns the imported image that team teamID's sandboxes name
// template: its own image NAME, or another team's TEAM/NAME. Whether the
// team may use it is checked where a sandbox is created (useImage).
func (s *Server) image(teamID, template string) (api.Image, bool) {
	s.images.mu.Lock()
	defer s.images.mu.Unlock()
	key := template
	if !strings.Contains(template, "/") {
		key = ownKey(teamID, template)
	}
	img, ok := s.images.byRef[key]
	return img, ok
}

// setImage puts img, owned by team ownerName, into the image set, or
// takes it out (gone).
func (s *Server) setImage(img api.Image, ownerName string, gone bool) {
	s.images.mu.Lock()
	defer s.images.mu.Unlock()
	if !s.images.loaded {
		return // loadImages reads it from the store
	}
	own, q := ownKey(img.TeamID, img.Name), qualifiedImage(ownerName, img.Name)
	if gone {
		delete(s.images.byRef, own)
		delete(s.images.byRef, q)
		return
	}
	s.images.teams[img.TeamID] = ownerName
	s.images.byRef[own] = img
	s.images.byRef[q] = img
}

// ownerName is the name of the team that owns img.
func (s *Server) ownerName(ctx context.Context, img api.Image) (string, error) {
	s.images.mu.Lock()
	name, ok := s.images.teams[img.TeamID]
	s.images.mu.Unlock()
	if ok {
		return name, nil
	}
	t, err := s.store.GetTeam(ctx, img.TeamID)
	if err != nil {
		return "", fmt.Errorf("owner of image %s: %w", img.ID, err)
	}
	return t.Name, nil
}

// asSeenBy fills img.Template: how team t names the image as a template.
func (s *Server) asSeenBy(ctx context.Context, t api.Team, img api.Image) (api.Image, error) {
	if img.TeamID == t.ID {
		img.Template = img.Name
		return img, nil
	}
	owner, err := s.ownerName(ctx, img)
	if err != nil {
		return api.Image{}, err
	}
	img.Template = qualifiedImage(owner, img.Name)
	return img, nil
}

// nodeTemplate is the node's name of the template a sandbox (or
// workload) of team teamID names: an imported image's tree is named by
// its digest ("sha256-…"); other templates by their names.
func (s *Server) nodeTemplate(teamID, name string) string {
	if img, ok := s.image(teamID, name); ok {
		return strings.Replace(img.Digest, ":", "-", 1)
	}
	return name
}

// imageVisible says whether team may see img: its owner, the teams it
// admits, every team when its mode is all, and the admin team.
func imageVisible(t api.Team, img api.Image) bool {
	switch {
	case t.Name == AdminTeam, img.TeamID == t.ID, img.Admission.Mode == api.ImageAdmitAll:
		return true
	case img.Admission.Mode == api.ImageAdmitTeams:
		return slices.Contains(img.Admission.Teams, t.ID)
	}
	return false
}

// visibleImage finds an image that the principal's team may see, by ID,
// by its own name, or by another team's TEAM/NAME; others are not found,
// with nothing said about whether they exist.
func (s *Server) visibleImage(ctx context.Context, p Principal, ref string) (api.Image, error) {
	img, err := s.store.GetImage(ctx, ref)
	if api.ErrorCode(err) == api.CodeNotFound {
		if team, name, ok := strings.Cut(ref, "/"); ok {
			var t api.Team
			if t, err = s.store.GetTeamByName(ctx, team); err == nil {
				img, err = s.store.GetImageByName(ctx, t.ID, name)
			}
		} else {
			img, err = s.store.GetImageByName(ctx, p.Team.ID, ref)
		}
	}
	if api.ErrorCode(err) == api.CodeNotFound || (err == nil && !imageVisible(p.Team, img)) {
		return api.Image{}, api.Errorf(api.CodeNotFound, "image %s not found", ref)
	}
	if err != nil {
		return api.Image{}, err
	}
	return s.asSeenBy(ctx, p.Team, img)
}

func (s *Server) requireImages() error {
	if s.importer == nil {
		return api.Errorf(api.CodeNotFound, "this server does not import images")
	}
	return nil
}

// ImportImage stores the image archive in body (an OCI image layout or a
// docker-save archive) as the team's image called name, with settings.
// The team needs the custom_images admission.
func (s *Server) ImportImage(ctx context.Context, p Principal, name string, settings api.ImageSettings, body io.Reader) (api.Image, error) {
	if err := s.requireImages(); err != nil {
		return api.Image{}, err
	}
	if err := scoped(p.Team.ID); err != nil {
		return api.Image{}, err
	}
	if err := s.requireAdmission(ctx, p.Team.ID, admitImages); err != nil {
		return api.Image{}, err
	}
	if name == "" {
		return api.Image{}, invalid("name the image: ?name=NAME")
	}
	if err := validateName(name); err != nil {
		return api.Image{}, err
	}
	if slices.Contains(s.cfg.Templates, name) {
		return api.Image{}, api.Errorf(api.CodeConflict, "%q is the name of a template of this server; choose another name", name)
	}
	now := s.now()
	img := api.Image{ID: id.New("img"), Name: name, TeamID: p.Team.ID, CreatedAt: now, UpdatedAt: now,
		Admission: api.ImageAdmission{Mode: api.ImageAdmitOwner, Teams: []string{}}, Examples: []string{}}
	if err := s.applyImageSettings(ctx, p, &img, settings); err != nil {
		return api.Image{}, err
	}
	if _, err := s.store.GetImageByName(ctx, p.Team.ID, name); err == nil {
		return api.Image{}, api.Errorf(api.CodeConflict, "this team has an image called %q already; choose another name", name)
	}

	// The archive arrives into a private file first, at the sender's
	// pace, counted against the team's image bytes; the lock below is
	// taken only once it is whole.
	u, err := s.beginUpload(p.Team.ID, uploadImage)
	if err != nil {
		return api.Image{}, err
	}
	defer u.end()
	maxArchive := int64(math.MaxInt64)
	if b, ok := s.importer.(interface{ MaxArchiveBytes() int64 }); ok && b.MaxArchiveBytes() > 0 {
		maxArchive = b.MaxArchiveBytes()
	}
	archive, err := s.spool(ctx, u, body, maxArchive, "", nil, "image archive")
	if err != nil {
		return api.Image{}, err
	}
	defer archive.Close()

	// Verified and unpacked outside the lock: however large the image,
	// other teams' creates, deletes and workloads do not wait for it.
	got, handle, err := s.importer.StageImage(ctx, archive.f)
	if err != nil {
		return api.Image{}, err
	}
	committed := false
	defer func() {
		if !committed {
			s.importer.DiscardImage(handle)
		}
	}()
	img.Digest, img.SizeBytes, img.Config = got.Digest, got.SizeBytes, got.Config

	// Held from the tree's storing to this image's row: a delete of
	// another name of the same tree must not remove it in between. Only
	// the cap's check, a rename and the row are done under it.
	s.images.use.Lock()
	defer s.images.use.Unlock()
	if err := s.loadImages(ctx); err != nil {
		return api.Image{}, err
	}
	if err := s.checkImageBytes(ctx, p.Team.ID, img.SizeBytes); err != nil {
		return api.Image{}, err
	}
	committed = true
	created, err := s.importer.CommitImage(ctx, handle)
	if err != nil {
		return api.Image{}, err
	}
	if err := s.store.CreateImage(ctx, img); err != nil {
		if created {
			if rerr := s.importer.RemoveImage(context.WithoutCancel(ctx), img.Digest); rerr != nil {
				s.log.Error("remove the tree of an image not stored", "digest", img.Digest, "err", rerr)
			}
		}
		return api.Image{}, err
	}
	s.setImage(img, p.Team.Name, false)
	img.Template = img.Name
	s.log.Info("image imported", "image", img.ID, "name", img.Name, "team", p.Team.ID, "digest", img.Digest, "new", created)
	s.emit(ctx, p.Team.ID, "image.imported", "", "", map[string]any{"image_id": img.ID, "name": img.Name, "digest": img.Digest})
	return img, nil
}

// teamImageBytes is the size of the team's imported images' trees.
func (s *Server) teamImageBytes(ctx context.Context, teamID string) (int64, error) {
	imgs, err := s.store.ListImages(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, img := range imgs {
		if img.TeamID == teamID {
			n += img.SizeBytes
		}
	}
	return n, nil
}

// checkImageBytes refuses an image whose tree would take the team's
// images past their cap (507).
func (s *Server) checkImageBytes(ctx context.Context, teamID string, size int64) error {
	used, err := s.teamImageBytes(ctx, teamID)
	if err != nil {
		return err
	}
	if used+size > s.cfg.MaxImageBytesPerTeam {
		return &api.Error{Code: api.CodeInsufficientStorage,
			Message: fmt.Sprintf("the image takes %d bytes unpacked and the team's images %d of its %d; delete images (DELETE /v1/images/{id}) to make room; nothing was kept",
				size, used, s.cfg.MaxImageBytesPerTeam),
			Details: map[string]any{"image_bytes": size, "used_bytes": used, "limit_bytes": s.cfg.MaxImageBytesPerTeam}}
	}
	return nil
}

// applyImageSettings validates settings and applies them to img.
func (s *Server) applyImageSettings(ctx context.Context, p Principal, img *api.Image, st api.ImageSettings) error {
	if d := st.Defaults; d != nil {
		if d.Resources != nil {
			if _, err := s.cfg.resolveResources(d.Resources); err != nil {
				return err
			}
		}
		if d.Network != nil {
			allow, err := checkPolicy("defaults.network.allow", d.Network.Allow)
			if err != nil {
				return err
			}
			if len(d.Network.SetupAllow) > 0 {
				return invalid("defaults.network.setup_allow cannot be set; a sandbox's setup names its own")
			}
			d.Network = &api.NetworkPolicy{Allow: allow}
		}
		for field, v := range map[string]*int64{"defaults.idle_timeout_s": d.IdleTimeoutS, "defaults.max_lifetime_s": d.MaxLifetimeS} {
			if v != nil && *v < 0 {
				return invalid("%s is negative", field)
			}
		}
		img.Defaults = *d
	}
	if l := st.Limits; l != nil {
		if l.MaxResources != nil {
			if _, err := s.cfg.resolveResources(l.MaxResources); err != nil {
				return err
			}
		}
		img.Limits = *l
	}
	if a := st.Admission; a != nil {
		teams := []string{}
		switch a.Mode {
		case api.ImageAdmitOwner:
		case api.ImageAdmitAll:
			if !p.Admin() {
				return &api.Error{Code: api.CodePermissionDenied,
					Message: `only an admin may admit an image to all teams; use mode "teams" with a list of team IDs`}
			}
		case api.ImageAdmitTeams:
			for _, t := range a.Teams {
				if _, err := s.store.GetTeam(ctx, t); api.ErrorCode(err) == api.CodeNotFound {
					return invalid("admission.teams: team %q does not exist; give team IDs (team_…)", t)
				} else if err != nil {
					return err
				}
				if !slices.Contains(teams, t) {
					teams = append(teams, t)
				}
			}
		default:
			return invalid(`admission.mode is %q; use "owner", "teams" or "all"`, a.Mode)
		}
		if a.Mode != api.ImageAdmitTeams && len(a.Teams) > 0 {
			return invalid(`admission.teams is only for mode "teams"`)
		}
		img.Admission = api.ImageAdmission{Mode: a.Mode, Teams: teams}
	}
	if st.Examples != nil {
		if len(st.Examples) > 50 {
			return invalid("examples has %d commands; at most 50 are allowed", len(st.Examples))
		}
		for _, e := range st.Examples {
			if e == "" || len(e) > maxCommandSize || strings.ContainsRune(e, 0) {
				return invalid("examples must be non-empty commands of at most %d bytes", maxCommandSize)
			}
		}
		img.Examples = slices.Clone(st.Examples)
	}
	return nil
}

// ListImages lists the images the team may see, by name.
func (s *Server) ListImages(ctx context.Context, p Principal) (api.List[api.Image], error) {
	if err := s.requireImages(); err != nil {
		return api.List[api.Image]{}, err
	}
	all, err := s.store.ListImages(ctx)
	if err != nil {
		return api.List[api.Image]{}, err
	}
	items := []api.Image{}
	for _, img := range all {
		if imageVisible(p.Team, img) {
			img, err := s.asSeenBy(ctx, p.Team, img)
			if err != nil {
				return api.List[api.Image]{}, err
			}
			items = append(items, img)
		}
	}
	return api.List[api.Image]{Items: items}, nil
}

// GetImage returns an image the team may see, by ID or name.
func (s *Server) GetImage(ctx context.Context, p Principal, ref string) (api.Image, error) {
	if err := s.requireImages(); err != nil {
		return api.Image{}, err
	}
	return s.visibleImage(ctx, p, ref)
}

// manageable refuses a team that sees an image but does not own it.
func manageable(p Principal, img api.Image) error {
	if img.TeamID != p.Team.ID && !p.Admin() {
		return &api.Error{Code: api.CodePermissionDenied,
			Message: fmt.Sprintf("image %s belongs to another team; only its team or an admin may change it", img.Name)}
	}
	return nil
}

// UpdateImage changes an image's settings.
func (s *Server) UpdateImage(ctx context.Context, p Principal, ref string, st api.ImageSettings) (api.Image, error) {
	if err := s.requireImages(); err != nil {
		return api.Image{}, err
	}
	img, err := s.visibleImage(ctx, p, ref)
	if err != nil {
		return api.Image{}, err
	}
	if err := manageable(p, img); err != nil {
		return api.Image{}, err
	}
	if err := s.applyImageSettings(ctx, p, &img, st); err != nil {
		return api.Image{}, err
	}
	img.UpdatedAt = s.now()
	if err := s.loadImages(ctx); err != nil {
		return api.Image{}, err
	}
	if err := s.store.UpdateImage(ctx, img); err != nil {
		return api.Image{}, err
	}
	owner, err := s.ownerName(ctx, img)
	if err != nil {
		return api.Image{}, err
	}
	s.setImage(img, owner, false)
	return img, nil
}

// DeleteImage deletes an image that no sandbox uses (asleep ones count)
// and no workload waits for or runs on, and its tree when no other image
// shares it.
func (s *Server) DeleteImage(ctx context.Context, p Principal, ref string) error {
	if err := s.requireImages(); err != nil {
		return err
	}
	img, err := s.visibleImage(ctx, p, ref)
	if err != nil {
		return err
	}
	if err := manageable(p, img); err != nil {
		return err
	}
	s.images.use.Lock()
	defer s.images.use.Unlock()
	if err := s.loadImages(ctx); err != nil {
		return err
	}
	owner, err := s.ownerName(ctx, img)
	if err != nil {
		return err
	}
	inUse, err := s.store.TemplateInUse(ctx, img.TeamID, img.Name, qualifiedImage(owner, img.Name))
	if err != nil {
		return err
	}
	if inUse {
		return &api.Error{Code: api.CodeConflict,
			Message: fmt.Sprintf("image %s is used by sandboxes that are not terminated; terminate them first", img.Name),
			Details: map[string]any{"image": img.Name}}
	}
	if err := s.refuseImageOfWorkloads(ctx, img, owner); err != nil {
		return err
	}
	if err := s.store.DeleteImage(ctx, img.ID); err != nil {
		return err
	}
	s.setImage(img, owner, true)
	n, err := s.store.ImagesWithDigest(ctx, img.Digest)
	if err != nil {
		return err
	}
	if n == 0 {
		if err := s.importer.RemoveImage(context.WithoutCancel(ctx), img.Digest); err != nil {
			return fmt.Errorf("remove the tree of image %s: %w", img.Name, err)
		}
	}
	s.log.Info("image deleted", "image", img.ID, "name", img.Name, "tree_removed", n == 0)
	s.emit(ctx, p.Team.ID, "image.deleted", "", "", map[string]any{"image_id": img.ID, "name": img.Name})
	return nil
}

// useImage resolves a create's template when it names an imported image:
// a team that may not see it gets not_found; the image's defaults fill
// what the request leaves out. It returns the image (nil for other
// templates) and a release that the caller calls once the sandbox is
// stored (or refused): until then the image cannot be deleted.
func (s *Server) useImage(ctx context.Context, teamID string, req *api.CreateSandboxRequest) (*api.Image, func(), error) {
	none := func() {}
	if req.Template == "" || slices.Contains(s.cfg.Templates, req.Template) {
		return nil, none, nil
	}
	if err := s.loadImages(ctx); err != nil {
		return nil, none, err
	}
	s.images.use.RLock()
	img, ok := s.image(teamID, req.Template)
	qualified := strings.Contains(req.Template, "/") // TEAM/NAME: only ever an image
	if !ok && !qualified {
		s.images.use.RUnlock()
		return nil, none, nil // newSandbox says the template does not exist
	}
	// Another team's image that this team may not see answers as one
	// that does not exist: nothing tells the two apart.
	gone := api.Errorf(api.CodeNotFound, "template %q does not exist", req.Template)
	if !ok {
		s.images.use.RUnlock()
		return nil, none, gone
	}
	t, err := s.store.GetTeam(ctx, teamID)
	if err != nil {
		s.images.use.RUnlock()
		return nil, none, err
	}
	if !imageVisible(t, img) {
		s.images.use.RUnlock()
		return nil, none, gone
	}
	d := img.Defaults
	if d.Resources != nil {
		r := api.ResourcesRequest{}
		if req.Resources != nil {
			r = *req.Resources
		}
		if r.CPUs == nil {
			r.CPUs = d.Resources.CPUs
		}
		if r.MemoryMiB == nil {
			r.MemoryMiB = d.Resources.MemoryMiB
		}
		if r.DiskMiB == nil {
			r.DiskMiB = d.Resources.DiskMiB
		}
		req.Resources = &r
	}
	if req.Network == nil && d.Network != nil {
		req.Network = &api.NetworkPolicy{Allow: slices.Clone(d.Network.Allow)}
	}
	if req.IdleTimeoutS == nil {
		req.IdleTimeoutS = d.IdleTimeoutS
	}
	if req.MaxLifetimeS == nil {
		req.MaxLifetimeS = d.MaxLifetimeS
	}
	if req.Workdir == "" && img.Config.WorkingDir != "" && img.Config.WorkingDir != "/" {
		req.Workdir = img.Config.WorkingDir
	}
	return &img, s.images.use.RUnlock, nil
}

// defaultUser is the account of a sandbox's default user: an imported
// image's own user, else "user".
func (s *Server) defaultUser(sb api.Sandbox) node.User {
	if img, ok := s.image(sb.TeamID, sb.Template); ok {
		c := img.Config
		return node.User{UID: c.UID, GID: c.GID, Home: c.Home}
	}
	return node.Users["user"]
}

// fileOwnerIn is fileOwner in sandbox sb: the default user ("" or
// "user") of an imported image's sandbox is the image's user.
func (s *Server) fileOwnerIn(sb api.Sandbox, user string, uid, gid int) (int, int) {
	if user == "" || user == "user" {
		u := s.defaultUser(sb)
		return u.UID, u.GID
	}
	return uid, gid
}

// checkImageLimits refuses resources beyond an image's maximum.
func checkImageLimits(img *api.Image, res api.Resources) error {
	if img == nil || img.Limits.MaxResources == nil {
		return nil
	}
	m := img.Limits.MaxResources
	switch {
	case m.CPUs != nil && res.CPUs > *m.CPUs:
		return rangeError("resources.cpus", fmt.Sprint(res.CPUs), "0.1", fmt.Sprint(*m.CPUs)+" (image "+img.Name+"'s limit)")
	case m.MemoryMiB != nil && res.MemoryMiB > *m.MemoryMiB:
		return rangeError("resources.memory_mib", fmt.Sprint(res.MemoryMiB), fmt.Sprint(MinMemoryMiB), fmt.Sprint(*m.MemoryMiB)+" (image "+img.Name+"'s limit)")
	case m.DiskMiB != nil && res.DiskMiB > *m.DiskMiB:
		return rangeError("resources.disk_mib", fmt.Sprint(res.DiskMiB), fmt.Sprint(MinDiskMiB), fmt.Sprint(*m.DiskMiB)+" (image "+img.Name+"'s limit)")
	}
	return nil
}

// imageCommand adapts a command of a sandbox of an imported image: its
// user is the image's (unless root is asked for), its environment starts
// from the image's Env, and a shell string needs a shell in the image.
func imageCommand(img api.Image, req api.CreateCommandRequest, user string, u node.User, env map[string]string) (node.User, map[string]string, error) {
	c := img.Config
	if req.Command != "" && len(c.Shell) == 0 {
		return u, env, invalid("image %s has no shell (/bin/sh or /bin/bash); run the program with argv instead of command", img.Name)
	}
	if user == "user" {
		u = node.User{UID: c.UID, GID: c.GID, Home: c.Home}
		name, _, _ := strings.Cut(c.User, ":")
		if _, err := strconv.Atoi(name); err != nil && name != "" {
			env["USER"], env["LOGNAME"] = name, name
		} else {
			delete(env, "USER")
			delete(env, "LOGNAME")
		}
		if u.Home == "" {
			u.Home = "/"
		}
		env["HOME"] = u.Home
	}
	base := maps.Clone(env)
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	// What cove sets for the user (HOME, USER) wins over the image's Env
	// only when the image says nothing of it.
	for _, k := range []string{"COVE_SANDBOX_ID", "TERM"} {
		if v, ok := base[k]; ok {
			env[k] = v
		}
	}
	return u, env, nil
}
