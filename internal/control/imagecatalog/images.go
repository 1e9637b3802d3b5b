package imagecatalog

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
)

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidArgument, format, args...)
}

func (c *Catalog) admin(t api.Team) bool { return t.Name == c.cfg.AdminTeam }

// Visible says whether team t may see img: its owner, the teams it
// admits, every team when its mode is all, and the admin team.
func (c *Catalog) Visible(t api.Team, img api.Image) bool { return VisibleTo(c.cfg.AdminTeam, t, img) }

// VisibleTo is Visible on a server whose admin team is named adminTeam.
func VisibleTo(adminTeam string, t api.Team, img api.Image) bool {
	switch {
	case t.Name == adminTeam, img.TeamID == t.ID, img.Admission.Mode == api.ImageAdmitAll:
		return true
	case img.Admission.Mode == api.ImageAdmitTeams:
		return slices.Contains(img.Admission.Teams, t.ID)
	}
	return false
}

// visible finds an image that team t may see, by ID, by its own name, or
// by another team's TEAM/NAME; others are not found, with nothing said
// about whether they exist.
func (c *Catalog) visible(ctx context.Context, t api.Team, ref string) (api.Image, error) {
	img, err := c.deps.Store.GetImage(ctx, ref)
	if api.ErrorCode(err) == api.CodeNotFound {
		if team, name, ok := strings.Cut(ref, "/"); ok {
			var owner api.Team
			if owner, err = c.deps.Store.GetTeamByName(ctx, team); err == nil {
				img, err = c.deps.Store.GetImageByName(ctx, owner.ID, name)
			}
		} else {
			img, err = c.deps.Store.GetImageByName(ctx, t.ID, ref)
		}
	}
	if api.ErrorCode(err) == api.CodeNotFound || (err == nil && !c.Visible(t, img)) {
		return api.Image{}, api.Errorf(api.CodeNotFound, "image %s not found", ref)
	}
	if err != nil {
		return api.Image{}, err
	}
	return c.AsSeenBy(ctx, t, img)
}

func (c *Catalog) require() error {
	if c.importer == nil {
		return api.Errorf(api.CodeNotFound, "this server does not import images")
	}
	return nil
}

// ImportImage stores the image archive in body (an OCI image layout or a
// docker-save archive) as team t's image called name, with settings.
// The team needs the custom_images admission.
func (c *Catalog) ImportImage(ctx context.Context, t api.Team, name string, settings api.ImageSettings, body io.Reader) (api.Image, error) {
	if err := c.require(); err != nil {
		return api.Image{}, err
	}
	if t.ID == "" {
		return api.Image{}, api.Errorf(api.CodeInternal, "a team-scoped call was made without a team")
	}
	if err := c.deps.Admission.RequireAdmission(ctx, t.ID, c.cfg.AdmitFlag); err != nil {
		return api.Image{}, err
	}
	if name == "" {
		return api.Image{}, invalid("name the image: ?name=NAME")
	}
	if err := c.deps.Validate.Name(name); err != nil {
		return api.Image{}, err
	}
	if slices.Contains(c.cfg.Templates, name) {
		return api.Image{}, api.Errorf(api.CodeConflict, "%q is the name of a template of this server; choose another name", name)
	}
	imgID := id.For(ctx, "img")
	if id.Resumed(ctx) {
		// The ID is derived from an Idempotency-Key whose claim this
		// attempt took over: a second attempt of the request (its first
		// on a replica that died) answers the image the first attempt stored.
		// A first attempt's derived ID is new: nothing to look for.
		if img, err := c.deps.Store.GetImage(ctx, imgID); err == nil && img.TeamID == t.ID {
			return c.AsSeenBy(ctx, t, img)
		} else if err != nil && api.ErrorCode(err) != api.CodeNotFound {
			return api.Image{}, err
		}
	}
	now := c.deps.Now()
	img := api.Image{ID: imgID, Name: name, TeamID: t.ID, CreatedAt: now, UpdatedAt: now,
		Admission: api.ImageAdmission{Mode: api.ImageAdmitOwner, Teams: []string{}}, Examples: []string{}}
	if err := c.applySettings(ctx, t, &img, settings); err != nil {
		return api.Image{}, err
	}
	if _, err := c.deps.Store.GetImageByName(ctx, t.ID, name); err == nil {
		return api.Image{}, api.Errorf(api.CodeConflict, "this team has an image called %q already; choose another name", name)
	}

	// The archive arrives into a private file first, at the sender's
	// pace, counted against the team's image bytes; the lock below is
	// taken only once it is whole.
	maxArchive := int64(math.MaxInt64)
	if b, ok := c.importer.(interface{ MaxArchiveBytes() int64 }); ok && b.MaxArchiveBytes() > 0 {
		maxArchive = b.MaxArchiveBytes()
	}
	archive, release, err := c.deps.Uploads.SpoolImage(ctx, t.ID, body, maxArchive)
	if err != nil {
		return api.Image{}, err
	}
	defer release()

	// Verified and unpacked outside the lock: however large the image,
	// other teams' creates, deletes and workloads do not wait for it.
	got, handle, err := c.importer.StageImage(ctx, archive)
	if err != nil {
		return api.Image{}, err
	}
	committed := false
	defer func() {
		if !committed {
			c.importer.DiscardImage(handle)
		}
	}()
	img.Digest, img.SizeBytes, img.Config = got.Digest, got.SizeBytes, got.Config

	// Held from the tree's storing to this image's row: a delete of
	// another name of the same tree must not remove it in between. Only
	// the cap's check, a rename and the row are done under it.
	c.use.Lock()
	defer c.use.Unlock()
	if err := c.Load(ctx); err != nil {
		return api.Image{}, err
	}
	if err := c.checkBytes(ctx, t.ID, img.SizeBytes); err != nil {
		return api.Image{}, err
	}
	committed = true
	created, err := c.importer.CommitImage(ctx, handle)
	if err != nil {
		return api.Image{}, err
	}
	if err := c.deps.Store.CreateImage(ctx, img); err != nil {
		if created {
			if rerr := c.importer.RemoveImage(context.WithoutCancel(ctx), img.Digest); rerr != nil {
				c.deps.Log.Error("remove the tree of an image not stored", "digest", img.Digest, "err", rerr)
			}
		}
		return api.Image{}, err
	}
	c.set(img, t.Name, false)
	img.Template = img.Name
	c.deps.Log.Info("image imported", "image", img.ID, "name", img.Name, "team", t.ID, "digest", img.Digest, "new", created)
	c.deps.Events.Emit(ctx, t.ID, "image.imported", map[string]any{"image_id": img.ID, "name": img.Name, "digest": img.Digest})
	return img, nil
}

// TeamBytes is the size of the team's imported images' trees.
func (c *Catalog) TeamBytes(ctx context.Context, teamID string) (int64, error) {
	imgs, err := c.deps.Store.ListImages(ctx)
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

// checkBytes refuses an image whose tree would take the team's images
// past their cap (507).
func (c *Catalog) checkBytes(ctx context.Context, teamID string, size int64) error {
	used, err := c.TeamBytes(ctx, teamID)
	if err != nil {
		return err
	}
	if limit := c.cfg.MaxBytesPerTeam; used+size > limit {
		return &api.Error{Code: api.CodeInsufficientStorage,
			Message: fmt.Sprintf("the image takes %d bytes unpacked and the team's images %d of its %d; delete images (DELETE /v1/images/{id}) to make room; nothing was kept",
				size, used, limit),
			Details: map[string]any{"image_bytes": size, "used_bytes": used, "limit_bytes": limit}}
	}
	return nil
}

// applySettings validates settings and applies them to img; t is the
// team of the caller.
func (c *Catalog) applySettings(ctx context.Context, t api.Team, img *api.Image, st api.ImageSettings) error {
	if d := st.Defaults; d != nil {
		if d.Resources != nil {
			if err := c.deps.Validate.Resources(d.Resources); err != nil {
				return err
			}
		}
		if d.Network != nil {
			allow, err := c.deps.Validate.Policy("defaults.network.allow", d.Network.Allow)
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
			if err := c.deps.Validate.Resources(l.MaxResources); err != nil {
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
			if !c.admin(t) {
				return &api.Error{Code: api.CodePermissionDenied,
					Message: `only an admin may admit an image to all teams; use mode "teams" with a list of team IDs`}
			}
		case api.ImageAdmitTeams:
			for _, id := range a.Teams {
				if _, err := c.deps.Store.GetTeam(ctx, id); api.ErrorCode(err) == api.CodeNotFound {
					return invalid("admission.teams: team %q does not exist; give team IDs (team_…)", id)
				} else if err != nil {
					return err
				}
				if !slices.Contains(teams, id) {
					teams = append(teams, id)
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
			if e == "" || len(e) > c.cfg.MaxCommandBytes || strings.ContainsRune(e, 0) {
				return invalid("examples must be non-empty commands of at most %d bytes", c.cfg.MaxCommandBytes)
			}
		}
		img.Examples = slices.Clone(st.Examples)
	}
	return nil
}

// ListImages lists the images team t may see, by name.
func (c *Catalog) ListImages(ctx context.Context, t api.Team) (api.List[api.Image], error) {
	if err := c.require(); err != nil {
		return api.List[api.Image]{}, err
	}
	all, err := c.deps.Store.ListImages(ctx)
	if err != nil {
		return api.List[api.Image]{}, err
	}
	items := []api.Image{}
	for _, img := range all {
		if c.Visible(t, img) {
			img, err := c.AsSeenBy(ctx, t, img)
			if err != nil {
				return api.List[api.Image]{}, err
			}
			items = append(items, img)
		}
	}
	return api.List[api.Image]{Items: items}, nil
}

// GetImage returns an image team t may see, by ID or name.
func (c *Catalog) GetImage(ctx context.Context, t api.Team, ref string) (api.Image, error) {
	if err := c.require(); err != nil {
		return api.Image{}, err
	}
	return c.visible(ctx, t, ref)
}

// manageable refuses a team that sees an image but does not own it.
func (c *Catalog) manageable(t api.Team, img api.Image) error {
	if img.TeamID != t.ID && !c.admin(t) {
		return &api.Error{Code: api.CodePermissionDenied,
			Message: fmt.Sprintf("image %s belongs to another team; only its team or an admin may change it", img.Name)}
	}
	return nil
}

// UpdateImage changes an image's settings.
func (c *Catalog) UpdateImage(ctx context.Context, t api.Team, ref string, st api.ImageSettings) (api.Image, error) {
	if err := c.require(); err != nil {
		return api.Image{}, err
	}
	img, err := c.visible(ctx, t, ref)
	if err != nil {
		return api.Image{}, err
	}
	if err := c.manageable(t, img); err != nil {
		return api.Image{}, err
	}
	if err := c.applySettings(ctx, t, &img, st); err != nil {
		return api.Image{}, err
	}
	img.UpdatedAt = c.deps.Now()
	if err := c.Load(ctx); err != nil {
		return api.Image{}, err
	}
	if err := c.deps.Store.UpdateImage(ctx, img); err != nil {
		return api.Image{}, err
	}
	owner, err := c.ownerName(ctx, img)
	if err != nil {
		return api.Image{}, err
	}
	c.set(img, owner, false)
	return img, nil
}

// DeleteImage deletes an image that no sandbox uses (asleep ones count),
// no snapshot holds changes to, and no workload waits for or runs on, and
// its tree when no other image shares it.
func (c *Catalog) DeleteImage(ctx context.Context, t api.Team, ref string) error {
	if err := c.require(); err != nil {
		return err
	}
	img, err := c.visible(ctx, t, ref)
	if err != nil {
		return err
	}
	if err := c.manageable(t, img); err != nil {
		return err
	}
	c.use.Lock()
	defer c.use.Unlock()
	if err := c.Load(ctx); err != nil {
		return err
	}
	owner, err := c.ownerName(ctx, img)
	if err != nil {
		return err
	}
	inUse, err := c.deps.Store.TemplateInUse(ctx, img.TeamID, img.Name, Qualified(owner, img.Name))
	if err != nil {
		return err
	}
	if inUse {
		return &api.Error{Code: api.CodeConflict,
			Message: fmt.Sprintf("image %s is used by sandboxes that are not terminated; terminate them first", img.Name),
			Details: map[string]any{"image": img.Name}}
	}
	if err := c.refuseSnapshots(ctx, img, owner); err != nil {
		return err
	}
	if err := c.deps.Workloads.RefuseImageDelete(ctx, img, owner); err != nil {
		return err
	}
	if err := c.deps.Store.DeleteImage(ctx, img.ID); err != nil {
		return err
	}
	c.set(img, owner, true)
	n, err := c.deps.Store.ImagesWithDigest(ctx, img.Digest)
	if err != nil {
		return err
	}
	if n == 0 {
		if err := c.importer.RemoveImage(context.WithoutCancel(ctx), img.Digest); err != nil {
			return fmt.Errorf("remove the tree of image %s: %w", img.Name, err)
		}
	}
	c.deps.Log.Info("image deleted", "image", img.ID, "name", img.Name, "tree_removed", n == 0)
	c.deps.Events.Emit(ctx, t.ID, "image.deleted", map[string]any{"image_id": img.ID, "name": img.Name})
	return nil
}

// refuseSnapshots answers 409 while snapshots hold changes to img: their
// files are layered on its tree, and a sandbox on them would find it gone
// (or, were another image given the name, lie on the wrong one). The
// image's team's snapshots are named; other teams' only counted.
func (c *Catalog) refuseSnapshots(ctx context.Context, img api.Image, owner string) error {
	snaps, err := c.deps.Store.TemplateSnapshots(ctx, img.TeamID, img.Name, Qualified(owner, img.Name))
	if err != nil || len(snaps) == 0 {
		return err
	}
	var own []string
	for _, s := range snaps {
		if s.TeamID == img.TeamID {
			own = append(own, s.ID)
		}
	}
	var held []string
	if len(own) > 0 {
		held = append(held, strings.Join(own, ", "))
	}
	if n := len(snaps) - len(own); n > 0 {
		held = append(held, fmt.Sprintf("%d of other teams", n))
	}
	return &api.Error{Code: api.CodeConflict,
		Message: fmt.Sprintf("image %s is kept by snapshots %s; delete them first (DELETE /v1/snapshots/{id})", img.Name, strings.Join(held, " and ")),
		Details: map[string]any{"image": img.Name, "snapshots": own, "other_snapshots": len(snaps) - len(own)}}
}
