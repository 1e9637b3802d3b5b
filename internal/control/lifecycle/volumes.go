package lifecycle

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// Volumes (issue #32). A volume is a team's disk that outlives sandboxes:
// the node makes it (CreateVolume answers where it is) and mounts it into
// each sandbox that names it at create, through the sandbox's own ID
// range. The mounts are kept with the sandbox (api.Sandbox.Volumes), so a
// start, a wake and an attach mount them again. A volume mounted by a
// sandbox not terminated is not deleted. Its size is a quota, charged as
// storage whether used or not; the leader measures the volumes that
// running sandboxes mount and raises volume.full once per crossing.

// MinVolumeMiB is the smallest volume: below it an ext4 holds little
// beyond its own metadata.
const MinVolumeMiB = 16

// MaxVolumeMounts bounds the volumes one sandbox mounts.
const MaxVolumeMounts = 16

// volumeRearm is the share of a volume's size its use must drop below
// before volume.full is raised again.
const volumeRearm = 0.9

// reservedPaths are where the sandbox's own filesystems and cove's
// mounts are: a volume is never mounted on, under or above one.
var reservedPaths = []string{
	"/proc", "/sys", "/dev",
	"/.cove",
	"/etc/resolv.conf", "/etc/hosts", "/etc/hostname",
	"/etc/ssl/certs/ca-certificates.crt",
}

// VolumeQuery pages a team's volumes.
type VolumeQuery struct {
	After string
	Limit int
}

func (s *Core) maxVolumeMiB() int64 {
	if s.cfg.MaxVolumeMiB > 0 {
		return s.cfg.MaxVolumeMiB
	}
	return 10240
}

// CreateVolume makes a new volume of the team.
func (s *Core) CreateVolume(ctx context.Context, teamID string, req api.CreateVolumeRequest) (api.Volume, error) {
	if err := scoped(teamID); err != nil {
		return api.Volume{}, err
	}
	if req.Name == "" {
		return api.Volume{}, &api.Error{Code: api.CodeInvalidArgument, Message: "name is required", Details: map[string]any{"field": "name"}}
	}
	if err := validateName(req.Name); err != nil {
		return api.Volume{}, err
	}
	if max := s.maxVolumeMiB(); req.SizeMiB < MinVolumeMiB || req.SizeMiB > max {
		return api.Volume{}, rangeError("size_mib", fmt.Sprint(req.SizeMiB), fmt.Sprint(MinVolumeMiB), fmt.Sprint(max))
	}
	vid := id.For(ctx, "vol")
	if id.Resumed(ctx) {
		// A second attempt of an idempotent create answers the first's;
		// a first attempt's derived ID is new.
		if v, err := s.store.GetVolume(ctx, teamID, vid); err == nil {
			return s.withUsers(ctx, v)
		}
	}
	s.volMu.Lock()
	defer s.volMu.Unlock()
	if _, err := s.store.GetVolume(ctx, teamID, req.Name); err == nil {
		return api.Volume{}, api.Errorf(api.CodeConflict, "a volume named %q already exists", req.Name)
	} else if api.ErrorCode(err) != api.CodeNotFound {
		return api.Volume{}, err
	}
	if err := s.volumeRoom(ctx, teamID, req.SizeMiB); err != nil {
		return api.Volume{}, err
	}
	ref, err := s.node.CreateVolume(ctx, vid, req.SizeMiB)
	if err != nil {
		return api.Volume{}, err
	}
	v := api.Volume{ID: vid, TeamID: teamID, Name: req.Name, SizeMiB: req.SizeMiB, Node: ref.Node, Sandboxes: []string{}, CreatedAt: s.now().UTC()}
	if err := s.store.CreateVolume(ctx, v); err != nil {
		if derr := s.node.DropVolume(context.WithoutCancel(ctx), ref); derr != nil {
			s.log.Warn("drop a volume not recorded", "volume", vid, "err", derr)
		}
		return api.Volume{}, err
	}
	s.log.Info("volume created", "volume", vid, "team", teamID, "size_mib", req.SizeMiB, "node", ref.Node)
	s.svc.Events.Emit(ctx, teamID, "volume.created", "", "", map[string]any{"volume_id": vid, "name": v.Name, "size_mib": v.SizeMiB})
	return v, nil
}

// volumeRoom refuses a new volume of sizeMiB past the team's caps.
func (s *Core) volumeRoom(ctx context.Context, teamID string, sizeMiB int64) error {
	n, total, err := s.store.VolumeTotals(ctx, teamID)
	if err != nil {
		return err
	}
	if max := s.cfg.MaxVolumesPerTeam; max > 0 && n >= max {
		return &api.Error{Code: api.CodeInsufficientStorage,
			Message: fmt.Sprintf("the team has %d volumes, its limit; delete some with DELETE /v1/volumes/{id}", n),
			Details: map[string]any{"volumes": n, "limit": max}}
	}
	if max := s.cfg.MaxVolumeMiBPerTeam; max > 0 && total+sizeMiB > max {
		return &api.Error{Code: api.CodeInsufficientStorage,
			Message: fmt.Sprintf("the team's volumes take %d MiB; %d more would pass its limit of %d MiB", total, sizeMiB, max),
			Details: map[string]any{"used_mib": total, "limit_mib": max}}
	}
	return nil
}

// GetVolume finds a volume of the team by ID or name.
func (s *Core) GetVolume(ctx context.Context, teamID, ref string) (api.Volume, error) {
	if err := scoped(teamID); err != nil {
		return api.Volume{}, err
	}
	v, err := s.store.GetVolume(ctx, teamID, ref)
	if err != nil {
		return api.Volume{}, err
	}
	return s.withUsers(ctx, v)
}

// withUsers fills in the sandboxes that mount v.
func (s *Core) withUsers(ctx context.Context, v api.Volume) (api.Volume, error) {
	users, err := s.store.VolumeUsers(ctx, v.TeamID, v.ID)
	if err != nil {
		return api.Volume{}, err
	}
	v.Sandboxes = users
	return v, nil
}

// ListVolumes lists a team's volumes, oldest first.
func (s *Core) ListVolumes(ctx context.Context, teamID string, q VolumeQuery) (api.List[api.Volume], error) {
	if err := scoped(teamID); err != nil {
		return api.List[api.Volume]{}, err
	}
	limit := q.Limit
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	rows, err := s.store.ListVolumes(ctx, teamID, q.After, limit+1)
	if err != nil {
		return api.List[api.Volume]{}, err
	}
	for i := range rows {
		if rows[i], err = s.withUsers(ctx, rows[i]); err != nil {
			return api.List[api.Volume]{}, err
		}
	}
	return cut(rows, limit, func(v api.Volume) string { return v.ID }), nil
}

// DeleteVolume removes a volume no sandbox, not terminated, mounts; one
// mounted answers 409 naming them.
func (s *Core) DeleteVolume(ctx context.Context, teamID, ref string) error {
	if err := scoped(teamID); err != nil {
		return err
	}
	s.volMu.Lock()
	defer s.volMu.Unlock()
	v, err := s.store.GetVolume(ctx, teamID, ref)
	if err != nil {
		return err
	}
	users, err := s.store.VolumeUsers(ctx, teamID, v.ID)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return &api.Error{Code: api.CodeConflict,
			Message: fmt.Sprintf("volume %s is mounted by %s; terminate those sandboxes first", v.ID, strings.Join(users, ", ")),
			Details: map[string]any{"sandboxes": users}}
	}
	if err := s.node.DropVolume(ctx, node.VolumeRef{ID: v.ID, Node: v.Node}); err != nil {
		return err
	}
	if err := s.store.DeleteVolume(ctx, teamID, v.ID); err != nil {
		return err
	}
	s.forgetFull(v.ID)
	s.log.Info("volume deleted", "volume", v.ID, "team", teamID)
	s.svc.Events.Emit(ctx, teamID, "volume.deleted", "", "", map[string]any{"volume_id": v.ID, "name": v.Name})
	return nil
}

// validateMountPath checks where a volume is mounted.
func validateMountPath(field, p string) error {
	bad := func(why string) error {
		return &api.Error{Code: api.CodeInvalidArgument,
			Message: fmt.Sprintf("%s %q: %s", field, p, why),
			Details: map[string]any{"field": field, "path": p}}
	}
	switch {
	case p == "":
		return bad("a path is required")
	case len(p) > 4096:
		return bad("longer than 4096 bytes")
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return bad("holds a control character")
	case !strings.HasPrefix(p, "/"):
		return bad("want an absolute path")
	case path.Clean(p) != p:
		return bad(fmt.Sprintf("want a clean path (%s)", path.Clean(p)))
	case p == "/":
		return bad("a volume cannot replace the root filesystem")
	}
	for _, r := range reservedPaths {
		if p == r || strings.HasPrefix(p, r+"/") || strings.HasPrefix(r, p+"/") {
			return bad(fmt.Sprintf("%s is the sandbox's own; mount elsewhere", r))
		}
	}
	return nil
}

// validateMounts checks a create's volume mounts, before any is looked up.
func validateMounts(ms []api.VolumeMount) error {
	if len(ms) > MaxVolumeMounts {
		return &api.Error{Code: api.CodeInvalidArgument,
			Message: fmt.Sprintf("volumes: %d mounts; at most %d", len(ms), MaxVolumeMounts),
			Details: map[string]any{"field": "volumes", "max": MaxVolumeMounts}}
	}
	for i, m := range ms {
		field := fmt.Sprintf("volumes[%d].path", i)
		if m.Name == "" {
			return &api.Error{Code: api.CodeInvalidArgument,
				Message: fmt.Sprintf("volumes[%d].name is required (a volume's name or ID)", i),
				Details: map[string]any{"field": fmt.Sprintf("volumes[%d].name", i)}}
		}
		if err := validateMountPath(field, m.Path); err != nil {
			return err
		}
		for j, o := range ms[:i] {
			if m.Path == o.Path || strings.HasPrefix(m.Path, o.Path+"/") || strings.HasPrefix(o.Path, m.Path+"/") {
				return &api.Error{Code: api.CodeInvalidArgument,
					Message: fmt.Sprintf("%s %q and volumes[%d].path %q nest; give each volume a path of its own", field, m.Path, j, o.Path),
					Details: map[string]any{"field": field, "path": m.Path, "other": o.Path}}
			}
		}
	}
	return nil
}

// resolveMounts looks up a create's volumes in the team: an unknown one
// answers 404. The caller holds volMu until the sandbox is stored, so
// that no volume it names is deleted in between.
func (s *Core) resolveMounts(ctx context.Context, teamID string, ms []api.VolumeMount) ([]api.VolumeMount, []node.VolumeMount, error) {
	var out []api.VolumeMount
	var specs []node.VolumeMount
	for i, m := range ms {
		v, err := s.store.GetVolume(ctx, teamID, m.Name)
		if api.ErrorCode(err) == api.CodeNotFound {
			return nil, nil, &api.Error{Code: api.CodeNotFound,
				Message: fmt.Sprintf("volumes[%d].name: volume %q not found; list your volumes with GET /v1/volumes", i, m.Name),
				Details: map[string]any{"field": fmt.Sprintf("volumes[%d].name", i)}}
		}
		if err != nil {
			return nil, nil, err
		}
		if slices.ContainsFunc(out, func(o api.VolumeMount) bool { return o.VolumeID == v.ID }) {
			return nil, nil, &api.Error{Code: api.CodeInvalidArgument,
				Message: fmt.Sprintf("volumes[%d]: volume %s is mounted twice", i, v.ID),
				Details: map[string]any{"field": fmt.Sprintf("volumes[%d].name", i)}}
		}
		out = append(out, api.VolumeMount{Name: v.Name, VolumeID: v.ID, Path: m.Path, ReadOnly: m.ReadOnly})
		specs = append(specs, node.VolumeMount{VolumeRef: node.VolumeRef{ID: v.ID, Node: v.Node}, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out, specs, nil
}

// volumeSpecs are the mounts of a stored sandbox, for the node: each
// volume where it is now.
func (s *Core) volumeSpecs(ctx context.Context, sb api.Sandbox) ([]node.VolumeMount, error) {
	var out []node.VolumeMount
	for _, m := range sb.Volumes {
		v, err := s.store.GetVolume(ctx, sb.TeamID, m.VolumeID)
		if err != nil {
			return nil, fmt.Errorf("volume %s of %s: %w", m.VolumeID, sb.ID, err)
		}
		out = append(out, node.VolumeMount{VolumeRef: node.VolumeRef{ID: v.ID, Node: v.Node}, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out, nil
}

// forkMounts are the mounts a fork of sb asks for: the same volumes at
// the same paths (a volume is shared; the fork's files are its own).
func forkMounts(sb api.Sandbox) []api.VolumeMount {
	var out []api.VolumeMount
	for _, m := range sb.Volumes {
		out = append(out, api.VolumeMount{Name: m.VolumeID, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}

// meterVolumes charges every volume's size as storage at the price
// table's storage price, in usage under the volume's ID, as snapshots are
// (storedAccruals): the hour now is in and the one before, each set at
// every tick.
func (s *Core) meterVolumes(ctx context.Context, now time.Time) {
	var acc []store.Accrual
	after := ""
	for {
		page, err := s.store.ListVolumes(ctx, "", after, 1000)
		if err != nil {
			s.log.Error("list volumes to meter", "err", err)
			return
		}
		for _, v := range page {
			acc = append(acc, storedAccruals(v.ID, v.TeamID, v.SizeMiB<<20, v.CreatedAt, now, s.cfg.Prices)...)
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].ID
	}
	if err := s.store.PutWorkloadUsage(ctx, acc); err != nil {
		s.log.Error("charge volumes", "err", err)
	}
}

// watchVolumes measures the volumes in use every VolumeUsageInterval
// until ctx ends (the leader's).
func (s *Core) watchVolumes(ctx context.Context) {
	every := s.cfg.VolumeUsageInterval
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.pollVolumes(ctx)
		case <-ctx.Done():
			return
		}
	}
}

// pollVolumes measures each volume a running sandbox mounts, records its
// use and raises volume.full when it fills: once per crossing, again only
// after its use dropped below volumeRearm of its size.
func (s *Core) pollVolumes(ctx context.Context) {
	s.volPoll.Lock()
	defer s.volPoll.Unlock()
	if vs, err := s.store.ListVolumes(ctx, "", "", 1); err != nil || len(vs) == 0 {
		return // no volume: running sandboxes are not listed
	}
	inUse := map[string]string{} // volume → team
	after := ""
	for {
		page, err := s.store.ListSandboxes(ctx, store.SandboxFilter{States: []api.SandboxState{api.StateRunning}, After: after, Limit: 1000})
		if err != nil {
			s.log.Warn("list sandboxes to measure volumes", "err", err)
			return
		}
		for _, sb := range page {
			for _, m := range sb.Volumes {
				inUse[m.VolumeID] = sb.TeamID
			}
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].ID
	}
	ids := make([]string, 0, len(inUse))
	for vid := range inUse {
		ids = append(ids, vid)
	}
	slices.Sort(ids)
	for _, vid := range ids {
		if ctx.Err() != nil {
			return
		}
		v, err := s.store.GetVolume(ctx, inUse[vid], vid)
		if err != nil {
			continue // deleted meanwhile
		}
		info, err := s.node.VolumeUsage(ctx, node.VolumeRef{ID: v.ID, Node: v.Node})
		if err != nil {
			s.log.Debug("measure a volume", "volume", v.ID, "err", err)
			continue
		}
		if info.UsedBytes != v.UsedBytes {
			if err := s.store.SetVolumeUsed(ctx, v.ID, info.UsedBytes); err != nil {
				s.log.Warn("record a volume's use", "volume", v.ID, "err", err)
			}
		}
		capacity := info.SizeBytes
		if capacity <= 0 {
			capacity = v.SizeMiB << 20
		}
		full := info.Full || info.UsedBytes >= capacity
		switch {
		case full && !s.volFull[v.ID]:
			s.volFull[v.ID] = true
			s.log.Info("volume full", "volume", v.ID, "team", v.TeamID, "used_bytes", info.UsedBytes)
			s.svc.Events.Emit(ctx, v.TeamID, "volume.full", "", "", map[string]any{
				"volume_id": v.ID, "name": v.Name, "size_mib": v.SizeMiB, "used_bytes": info.UsedBytes})
		case !full && s.volFull[v.ID] && float64(info.UsedBytes) < volumeRearm*float64(capacity):
			delete(s.volFull, v.ID)
		}
	}
}

// forgetFull drops what pollVolumes remembers of a deleted volume.
func (s *Core) forgetFull(id string) {
	s.volPoll.Lock()
	defer s.volPoll.Unlock()
	delete(s.volFull, id)
}
