package imagecatalog

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
)

// Use resolves a create's template when it names an imported image: a
// team that may not see it gets not_found; the image's defaults fill what
// the request leaves out. It returns the image (nil for other templates)
// and a release that the caller calls once the sandbox is stored (or
// refused): until then the image cannot be deleted.
func (c *Catalog) Use(ctx context.Context, teamID string, req *api.CreateSandboxRequest) (*api.Image, func(), error) {
	none := func() {}
	if req.Template == "" || slices.Contains(c.cfg.Templates, req.Template) {
		return nil, none, nil
	}
	if err := c.Load(ctx); err != nil {
		return nil, none, err
	}
	c.use.RLock()
	img, ok := c.Image(teamID, req.Template)
	qualified := strings.Contains(req.Template, "/") // TEAM/NAME: only ever an image
	if !ok && !qualified {
		c.use.RUnlock()
		return nil, none, nil // the create says the template does not exist
	}
	// Another team's image that this team may not see answers as one
	// that does not exist: nothing tells the two apart.
	gone := api.Errorf(api.CodeNotFound, "template %q does not exist", req.Template)
	if !ok {
		c.use.RUnlock()
		return nil, none, gone
	}
	t, err := c.deps.Store.GetTeam(ctx, teamID)
	if err != nil {
		c.use.RUnlock()
		return nil, none, err
	}
	if !c.Visible(t, img) {
		c.use.RUnlock()
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
	return &img, c.use.RUnlock, nil
}

// DefaultUser is the account of a sandbox's default user: an imported
// image's own user, else "user".
func (c *Catalog) DefaultUser(sb api.Sandbox) node.User {
	if img, ok := c.Image(sb.TeamID, sb.Template); ok {
		cf := img.Config
		return node.User{UID: cf.UID, GID: cf.GID, Home: cf.Home}
	}
	return node.Users["user"]
}

// FileOwnerIn is the owner of a file that user writes in sandbox sb: the
// default user ("" or "user") of an imported image's sandbox is the
// image's user; others keep uid and gid.
func (c *Catalog) FileOwnerIn(sb api.Sandbox, user string, uid, gid int) (int, int) {
	if user == "" || user == "user" {
		u := c.DefaultUser(sb)
		return u.UID, u.GID
	}
	return uid, gid
}

// CheckLimits refuses resources beyond an image's maximum (img may be
// nil: no image, no limit); minMemoryMiB and minDiskMiB are the server's
// lower bounds, which the refusal names.
func CheckLimits(img *api.Image, res api.Resources, minMemoryMiB, minDiskMiB int) error {
	if img == nil || img.Limits.MaxResources == nil {
		return nil
	}
	m := img.Limits.MaxResources
	switch {
	case m.CPUs != nil && res.CPUs > *m.CPUs:
		return rangeError("resources.cpus", fmt.Sprint(res.CPUs), "0.1", fmt.Sprint(*m.CPUs)+" (image "+img.Name+"'s limit)")
	case m.MemoryMiB != nil && res.MemoryMiB > *m.MemoryMiB:
		return rangeError("resources.memory_mib", fmt.Sprint(res.MemoryMiB), fmt.Sprint(minMemoryMiB), fmt.Sprint(*m.MemoryMiB)+" (image "+img.Name+"'s limit)")
	case m.DiskMiB != nil && res.DiskMiB > *m.DiskMiB:
		return rangeError("resources.disk_mib", fmt.Sprint(res.DiskMiB), fmt.Sprint(minDiskMiB), fmt.Sprint(*m.DiskMiB)+" (image "+img.Name+"'s limit)")
	}
	return nil
}

func rangeError(field, got, lo, hi string) error {
	return &api.Error{
		Code:    api.CodeInvalidArgument,
		Message: fmt.Sprintf("%s is %s; it must be between %s and %s", field, got, lo, hi),
		Details: map[string]any{"field": field, "min": lo, "max": hi},
	}
}

// Command adapts a command of a sandbox of an imported image: its user
// is the image's (unless root is asked for), its environment starts from
// the image's Env, and a shell string needs a shell in the image.
func Command(img api.Image, req api.CreateCommandRequest, user string, u node.User, env map[string]string) (node.User, map[string]string, error) {
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
