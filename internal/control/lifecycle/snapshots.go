package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/metering"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// Snapshots (issue #32). A snapshot is a sandbox's files frozen at one
// moment: the node copies the sandbox's disk (its own upper layer) while
// its filesystem is frozen, keeps the copy in the save store under the
// snapshot's ID and, on the node, as a read-only layer. A sandbox started
// on a snapshot (source type snapshot, a fork, a restore) stands on the
// snapshot's chain of layers (its own disk, then the layers its sandbox
// stood on) and has a new, empty disk of its own above them: its files
// cost nothing until it writes. The store records which sandboxes and
// snapshots stand on each snapshot; a snapshot stood on is not deleted.

// SnapshotQuery selects a team's snapshots.
type SnapshotQuery struct {
	SandboxID string
	After     string
	Limit     int
}

func (s *Core) maxFork() int {
	if s.cfg.MaxFork > 0 {
		return s.cfg.MaxFork
	}
	return 100
}

// CreateSnapshot freezes a running or asleep sandbox's files as a new
// snapshot of the team named name. A running sandbox's commands go on.
func (s *Core) CreateSnapshot(ctx context.Context, teamID, ref string, req api.CreateSnapshotRequest) (api.Snapshot, error) {
	if err := scoped(teamID); err != nil {
		return api.Snapshot{}, err
	}
	if req.Name == "" {
		return api.Snapshot{}, invalid("name is required")
	}
	if err := validateName(req.Name); err != nil {
		return api.Snapshot{}, err
	}
	sb, o, err := s.lockSandbox(ctx, teamID, ref)
	if err != nil {
		return api.Snapshot{}, err
	}
	defer o.mu.Unlock()
	snap, err := s.snapshot(ctx, sb, req.Name, false)
	return snap.Snapshot, err
}

// snapshot makes a snapshot of sb, whose life-cycle lock the caller holds.
func (s *Core) snapshot(ctx context.Context, sb api.Sandbox, name string, fork bool) (store.Snapshot, error) {
	if sb.State != api.StateRunning && sb.State != api.StateAsleep {
		return store.Snapshot{}, api.Errorf(api.CodeConflict, "sandbox %s is %s; only a running or asleep sandbox can be snapshotted", sb.ID, sb.State)
	}
	if _, err := s.store.GetSnapshot(ctx, sb.TeamID, name); err == nil {
		return store.Snapshot{}, api.Errorf(api.CodeConflict, "a snapshot named %q already exists", name)
	} else if api.ErrorCode(err) != api.CodeNotFound {
		return store.Snapshot{}, err
	}
	if err := s.snapshotRoom(ctx, sb.TeamID); err != nil {
		return store.Snapshot{}, err
	}
	spec, err := s.startSpec(ctx, sb)
	if err != nil {
		return store.Snapshot{}, err
	}
	sid := id.New("snap")
	t0 := time.Now()
	info, err := s.node.Snapshot(ctx, sb.ID, sid, sb.State == api.StateAsleep, "")
	if err != nil {
		return store.Snapshot{}, err
	}
	snap := store.Snapshot{
		Snapshot: api.Snapshot{
			ID: sid, TeamID: sb.TeamID, Name: name, SandboxID: sb.ID,
			SizeBytes: info.ArchiveBytes, DataBytes: info.DataBytes, Digest: "sha256:" + info.SHA256,
			Fork: fork, CreatedAt: s.now(),
		},
		Template: sb.Template, Workdir: sb.Workdir,
		Layers: []store.Layer{{Snapshot: sid, HostID: spec.IDs.HostID, Size: spec.IDs.Size}},
	}
	for _, l := range spec.Layers {
		snap.Layers = append(snap.Layers, store.Layer{Snapshot: l.Snapshot, HostID: l.IDs.HostID, Size: l.IDs.Size})
	}
	if err := s.store.CreateSnapshot(ctx, snap); err != nil {
		if derr := s.node.DropSnapshot(context.WithoutCancel(ctx), sid); derr != nil {
			s.log.Warn("drop a snapshot not recorded", "snapshot", sid, "err", derr)
		}
		return store.Snapshot{}, err
	}
	s.log.Info("snapshot created", "snapshot", sid, "sandbox", sb.ID, "data_bytes", info.DataBytes, "archive_bytes", info.ArchiveBytes, "took", time.Since(t0))
	s.svc.Events.Emit(ctx, sb.TeamID, "snapshot.created", sb.ID, "", map[string]any{"snapshot_id": sid, "name": name, "size_bytes": info.ArchiveBytes, "fork": fork})
	return snap, nil
}

// snapshotRoom refuses a new snapshot past the team's cap.
func (s *Core) snapshotRoom(ctx context.Context, teamID string) error {
	n, max := 0, s.cfg.MaxSnapshotsPerTeam
	if max <= 0 {
		max = 100
	}
	after := ""
	for {
		page, err := s.store.ListSnapshots(ctx, teamID, "", after, 1000)
		if err != nil {
			return err
		}
		n += len(page)
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].ID
	}
	if n >= max {
		return api.Errorf(api.CodeInsufficientStorage, "the team has %d snapshots, its limit; delete some with DELETE /v1/snapshots/{id}", n)
	}
	if maxBytes := s.cfg.MaxSnapshotBytesPerTeam; maxBytes > 0 {
		b, err := s.store.SnapshotBytes(ctx, teamID)
		if err != nil {
			return err
		}
		if b >= maxBytes {
			return api.Errorf(api.CodeInsufficientStorage, "the team's snapshots take %d bytes, its limit of %d; delete some with DELETE /v1/snapshots/{id}", b, maxBytes)
		}
	}
	return nil
}

// meterSnapshots charges every snapshot's stored bytes as storage at the
// price table's storage price, in usage under the snapshot's ID: the hour
// now is in and the one before, each set (not added to) at every tick, so
// a tick seen twice charges nothing twice.
func (s *Core) meterSnapshots(ctx context.Context, now time.Time) {
	var acc []store.Accrual
	after := ""
	for {
		page, err := s.store.ListSnapshots(ctx, "", "", after, 1000)
		if err != nil {
			s.log.Error("list snapshots to meter", "err", err)
			return
		}
		for _, snap := range page {
			acc = append(acc, storedAccruals(snap.ID, snap.TeamID, snap.SizeBytes, snap.CreatedAt, now, s.cfg.Prices)...)
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].ID
	}
	if err := s.store.PutWorkloadUsage(ctx, acc); err != nil {
		s.log.Error("charge snapshots", "err", err)
	}
}

// storedAccruals charges bytes kept under id for team since created as
// storage: the hour now is in and the one before, each clipped to created
// and now, an hour with none of that time left out. Snapshots and volumes
// are charged so, each tick setting (not adding to) both hours.
func storedAccruals(id, team string, bytes int64, created, now time.Time, prices api.Prices) []store.Accrual {
	var acc []store.Accrual
	for _, hour := range []time.Time{now.Truncate(time.Hour).Add(-time.Hour), now.Truncate(time.Hour)} {
		from, to := hour, hour.Add(time.Hour)
		if created.After(from) {
			from = created
		}
		if now.Before(to) {
			to = now
		}
		if !to.After(from) {
			continue
		}
		use := metering.Stored(bytes, to.Sub(from).Seconds())
		acc = append(acc, store.Accrual{SandboxID: id, TeamID: team, Hour: hour,
			StorageGiBH: use.StorageGiBH, CostUSD: use.Cost(prices)})
	}
	return acc
}

// GetSnapshot finds a snapshot of the team by ID or name.
func (s *Core) GetSnapshot(ctx context.Context, teamID, ref string) (api.Snapshot, error) {
	if err := scoped(teamID); err != nil {
		return api.Snapshot{}, err
	}
	snap, err := s.store.GetSnapshot(ctx, teamID, ref)
	return snap.Snapshot, err
}

// ListSnapshots lists a team's snapshots, oldest first.
func (s *Core) ListSnapshots(ctx context.Context, teamID string, q SnapshotQuery) (api.List[api.Snapshot], error) {
	if err := scoped(teamID); err != nil {
		return api.List[api.Snapshot]{}, err
	}
	limit := q.Limit
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	sandboxID := q.SandboxID
	if sandboxID != "" {
		if sb, err := s.GetSandbox(ctx, teamID, sandboxID); err == nil {
			sandboxID = sb.ID
		} else if api.ErrorCode(err) != api.CodeNotFound {
			return api.List[api.Snapshot]{}, err
		}
	}
	rows, err := s.store.ListSnapshots(ctx, teamID, sandboxID, q.After, limit+1)
	if err != nil {
		return api.List[api.Snapshot]{}, err
	}
	items := make([]api.Snapshot, 0, len(rows))
	for _, r := range rows {
		items = append(items, r.Snapshot)
	}
	return cut(items, limit, func(x api.Snapshot) string { return x.ID }), nil
}

// DeleteSnapshot removes a snapshot no sandbox or snapshot stands on; one
// stood on answers 409 naming them.
func (s *Core) DeleteSnapshot(ctx context.Context, teamID, ref string) error {
	if err := scoped(teamID); err != nil {
		return err
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	snap, err := s.store.GetSnapshot(ctx, teamID, ref)
	if err != nil {
		return err
	}
	users, err := s.store.SnapshotUsers(ctx, snap.ID)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return api.Errorf(api.CodeConflict, "snapshot %s is in use by %s; terminate those sandboxes and delete those snapshots first", snap.ID, strings.Join(users, ", "))
	}
	if err := s.node.DropSnapshot(ctx, snap.ID); err != nil {
		return err
	}
	if err := s.store.DeleteSnapshot(ctx, teamID, snap.ID); err != nil {
		return err
	}
	s.svc.Events.Emit(ctx, teamID, "snapshot.deleted", snap.SandboxID, "", map[string]any{"snapshot_id": snap.ID, "name": snap.Name})
	return nil
}

// dropForkSnapshots deletes the fork snapshots a terminated sandbox stood
// on once nothing stands on them any more: a fork's snapshot goes with
// its last fork. Called after the sandbox is recorded terminated.
func (s *Core) dropForkSnapshots(ctx context.Context, sb api.Sandbox) {
	layers, err := s.store.SandboxLayers(ctx, sb.ID)
	if err != nil || len(layers) == 0 {
		return
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	for _, l := range layers {
		snap, err := s.store.GetSnapshot(ctx, sb.TeamID, l.Snapshot)
		if err != nil || !snap.Fork {
			continue
		}
		if users, err := s.store.SnapshotUsers(ctx, snap.ID); err != nil || len(users) > 0 {
			continue
		}
		if err := s.node.DropSnapshot(ctx, snap.ID); err != nil {
			s.log.Warn("drop a fork's snapshot", "snapshot", snap.ID, "err", err)
			continue
		}
		if err := s.store.DeleteSnapshot(ctx, sb.TeamID, snap.ID); err != nil {
			s.log.Warn("delete a fork's snapshot", "snapshot", snap.ID, "err", err)
			continue
		}
		s.svc.Events.Emit(ctx, sb.TeamID, "snapshot.deleted", snap.SandboxID, "", map[string]any{"snapshot_id": snap.ID, "name": snap.Name})
	}
}

// sourceSnapshot resolves a create's snapshot source and fits the request
// to it: the snapshot's template (its files are changes to that image's)
// and, unless asked otherwise, its workdir.
func (s *Core) sourceSnapshot(ctx context.Context, teamID string, req *api.CreateSandboxRequest) (*store.Snapshot, error) {
	if req.Source == nil || req.Source.Type != api.SourceSnapshot {
		return nil, nil
	}
	if req.Source.SnapshotID == "" {
		return nil, invalid("source type snapshot needs snapshot_id (an ID or name from GET /v1/snapshots)")
	}
	if req.Source.AssetID != "" || req.Source.URL != "" || req.Source.Ref != "" || req.Source.AuthSecret != "" || req.Source.Depth != 0 {
		return nil, invalid("source type snapshot takes only snapshot_id")
	}
	snap, err := s.store.GetSnapshot(ctx, teamID, req.Source.SnapshotID)
	if api.ErrorCode(err) == api.CodeNotFound {
		return nil, api.Errorf(api.CodeNotFound, "source.snapshot_id: snapshot %q not found; list your snapshots with GET /v1/snapshots", req.Source.SnapshotID)
	}
	if err != nil {
		return nil, err
	}
	if req.Template != "" && req.Template != snap.Template {
		return nil, invalid("template %q: snapshot %s holds changes to template %q; leave template out", req.Template, snap.ID, snap.Template)
	}
	req.Template = snap.Template
	if req.Workdir == "" {
		req.Workdir = snap.Workdir
	}
	if req.Setup != nil && req.Setup.Cache {
		return nil, invalid("setup.cache does not apply to a sandbox started on a snapshot")
	}
	return &snap, nil
}

// standOn records that a new sandbox stands on snap's layers; the
// snapshot must still be there.
func (s *Core) standOn(ctx context.Context, sandboxID string, snap *store.Snapshot) error {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if _, err := s.store.GetSnapshot(ctx, snap.TeamID, snap.ID); err != nil {
		return err
	}
	return s.store.SetSandboxLayers(ctx, sandboxID, snap.Layers)
}

// layersOf are the layers a sandbox stands on, for the node.
func (s *Core) layersOf(ctx context.Context, sandboxID string) ([]node.Layer, error) {
	ls, err := s.store.SandboxLayers(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	var out []node.Layer
	for _, l := range ls {
		out = append(out, node.Layer{Snapshot: l.Snapshot, IDs: node.IDRange{HostID: l.HostID, Size: l.Size}})
	}
	return out, nil
}

// Restoring begins the state reason of a sandbox being returned to a
// snapshot, the snapshot's ID after it: the restore's record in the
// store, written before anything of the sandbox is removed, from which a
// restart finishes it (finishRestore), as it does in a data dir restored
// from a backup taken meanwhile (internal/backup keeps such a sandbox as
// it is; its snapshot's files are in the backup).
const Restoring = "restoring to snapshot "

// RestoreSandbox returns a running or asleep sandbox to a snapshot of the
// team: its running commands end as at a sleep, its own files are
// dropped, and it runs again on the snapshot's files. Its ID, name,
// network, range and history stay. The sandbox is waking while it
// happens, and a restart of the server in the middle finishes it.
func (s *Core) RestoreSandbox(ctx context.Context, teamID, ref string, req api.RestoreSandboxRequest) (api.Sandbox, error) {
	if err := scoped(teamID); err != nil {
		return api.Sandbox{}, err
	}
	if req.SnapshotID == "" {
		return api.Sandbox{}, invalid("snapshot_id is required")
	}
	sb, o, err := s.lockSandbox(ctx, teamID, ref)
	if err != nil {
		return sb, err
	}
	defer o.mu.Unlock()
	snap, err := s.store.GetSnapshot(ctx, teamID, req.SnapshotID)
	if api.ErrorCode(err) == api.CodeNotFound {
		return sb, api.Errorf(api.CodeNotFound, "snapshot_id: snapshot %q not found", req.SnapshotID)
	}
	if err != nil {
		return sb, err
	}
	if snap.Template != sb.Template {
		return sb, api.Errorf(api.CodeConflict, "snapshot %s holds changes to template %q; sandbox %s runs %q", snap.ID, snap.Template, sb.ID, sb.Template)
	}
	if sb.State != api.StateRunning && sb.State != api.StateAsleep {
		return sb, api.Errorf(api.CodeConflict, "sandbox %s is %s; only a running or asleep sandbox can be restored", sb.ID, sb.State)
	}
	// The restore is recorded before anything goes; from here on it is
	// finished, by this call or by Recover after a crash, even should the
	// caller go away.
	if err := s.setState(ctx, &sb, api.StateWaking, Restoring+snap.ID); err != nil {
		return sb, err
	}
	return s.finishRestore(context.WithoutCancel(ctx), sb, snap.ID)
}

// finishRestore returns a waking sandbox to the snapshot its state reason
// names, from wherever an earlier attempt stopped: every step can be done
// again. Its running commands end lost, its runtime and own disk go, it
// stands on the snapshot's layers, its save goes, and it starts on them.
// The caller holds its life-cycle lock.
func (s *Core) finishRestore(ctx context.Context, sb api.Sandbox, snapID string) (api.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	fail := func(err error) (api.Sandbox, error) {
		s.log.Error("restore", "sandbox", sb.ID, "snapshot", snapID, "err", err)
		if derr := s.node.DestroyRuntime(ctx, sb.ID); derr != nil {
			s.log.Error("remove runtime of failed restore", "sandbox", sb.ID, "err", derr)
		}
		s.loseCommands(ctx, sb.ID)
		s.persistState(ctx, &sb, api.StateFailed, "restore failed: "+userReason(err))
		return sb, err
	}
	snap, err := s.store.GetSnapshot(ctx, sb.TeamID, snapID)
	if err != nil {
		return fail(err)
	}
	// Its processes end first: running commands are lost, as at a sleep.
	if running, err := s.runningCommandIDs(ctx, sb.ID); err == nil && len(running) > 0 {
		s.node.Lose(sb.ID, running)
	}
	if err := s.node.DestroyRuntime(ctx, sb.ID); err != nil {
		return fail(err)
	}
	// What the node could not mark (a restore finished after a restart
	// has no runtime to ask) is marked here.
	s.loseCommands(ctx, sb.ID)
	if err := s.standOn(ctx, sb.ID, &snap); err != nil {
		return fail(err)
	}
	if err := s.node.DropSave(ctx, sb.ID); err != nil {
		s.log.Warn("drop the save of a restored sandbox", "sandbox", sb.ID, "err", err)
	}
	spec, err := s.startSpec(ctx, sb)
	if err == nil {
		spec.Secrets = s.svc.Vault.SandboxRedactions(ctx, sb)
		err = s.node.Start(ctx, spec)
	}
	if err != nil {
		return fail(err)
	}
	if err := s.setState(ctx, &sb, api.StateRunning, ""); err != nil {
		return sb, err
	}
	s.reapplyPolicy(sb, spec.Network)
	s.limits.touch(sb.ID, s.now())
	s.svc.Events.Emit(ctx, sb.TeamID, "sandbox.restored", sb.ID, "", map[string]any{"snapshot_id": snap.ID})
	return s.svc.Meter.Priced(sb), nil
}

// ForkSandbox makes req.Count new sandboxes of the team from a running or
// asleep sandbox's files as they are now: one snapshot of it (marked
// fork), and each new sandbox on it with a disk, ID range, network
// identity and recorded output of its own. The parent goes on.
func (s *Core) ForkSandbox(ctx context.Context, teamID, ref string, req api.ForkSandboxRequest) ([]api.Sandbox, error) {
	if err := scoped(teamID); err != nil {
		return nil, err
	}
	if req.Count < 1 || req.Count > s.maxFork() {
		return nil, invalid("count %d: want 1 to %d (the server's --max-fork)", req.Count, s.maxFork())
	}
	if req.Names != nil && len(req.Names) != req.Count {
		return nil, invalid("names has %d names for a count of %d", len(req.Names), req.Count)
	}
	for _, n := range req.Names {
		if err := validateName(n); err != nil {
			return nil, err
		}
	}
	if req.Labels != nil {
		if err := validateLabels(req.Labels); err != nil {
			return nil, err
		}
	}
	sb, o, err := s.lockSandbox(ctx, teamID, ref)
	if err != nil {
		return nil, err
	}
	snap, err := s.snapshot(ctx, sb, fmt.Sprintf("fork-%s-%d", strings.ToLower(strings.TrimPrefix(sb.ID, "sbx_")), s.now().UnixNano()), true)
	o.mu.Unlock()
	if err != nil {
		return nil, err
	}
	labels := req.Labels
	if labels == nil {
		labels = sb.Labels
	}
	var out []api.Sandbox
	for i := range req.Count {
		cr := api.CreateSandboxRequest{
			Template: sb.Template, Env: sb.Env, Workdir: sb.Workdir,
			Resources: &api.ResourcesRequest{CPUs: &sb.Resources.CPUs, MemoryMiB: &sb.Resources.MemoryMiB, DiskMiB: &sb.Resources.DiskMiB},
			Labels:    labels, Secrets: secretRefs(sb), OnIdle: sb.OnIdle,
			Network: &api.NetworkPolicy{Allow: sb.Network.Allow, Inject: sb.Network.Inject},
			Source:  &api.Source{Type: api.SourceSnapshot, SnapshotID: snap.ID},
			// A fork mounts its parent's volumes where the parent does:
			// shared, as they are between any two sandboxes.
			Volumes: forkMounts(sb),
		}
		if sb.IdleTimeoutS > 0 {
			v := sb.IdleTimeoutS
			cr.IdleTimeoutS = &v
		}
		if req.Names != nil {
			cr.Name = req.Names[i]
		}
		child, err := s.CreateSandbox(ctx, teamID, cr)
		if err != nil {
			// All or none: the forks made so far go.
			for _, c := range out {
				if _, terr := s.TerminateSandbox(context.WithoutCancel(ctx), teamID, c.ID); terr != nil {
					s.log.Warn("terminate a fork of a failed fork", "sandbox", c.ID, "err", terr)
				}
			}
			return nil, fmt.Errorf("fork %d of %d: %w", i+1, req.Count, err)
		}
		out = append(out, child)
	}
	ids := make([]string, len(out))
	for i, c := range out {
		ids[i] = c.ID
	}
	s.svc.Events.Emit(ctx, teamID, "sandbox.forked", sb.ID, "", map[string]any{"snapshot_id": snap.ID, "sandbox_ids": ids})
	return out, nil
}

// secretRefs are a sandbox's secrets as a create asks for them: each
// variable's secret, with a placeholder where the sandbox has one (a fork
// gets placeholders of its own).
func secretRefs(sb api.Sandbox) map[string]api.SecretRef {
	if len(sb.Secrets) == 0 {
		return nil
	}
	out := make(map[string]api.SecretRef, len(sb.Secrets))
	for v, name := range sb.Secrets {
		out[v] = api.SecretRef{Secret: name, Placeholder: slices.Contains(sb.Placeholders, v)}
	}
	return out
}
