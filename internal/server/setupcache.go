package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// The setup cache keeps, per team, the disk of a sandbox whose setup
// succeeded with setup.cache, under a key of what made it: the template,
// the disk size, the source's digest and the setup's definition. A create
// with the same key starts from that disk and skips the setup. Entries
// are evicted least recently used first once a team holds more than
// SetupCacheEntries of them or more than SetupCacheBytes.

// setupKey is the cache key of a sandbox whose source has landed.
func setupKey(sb api.Sandbox) string {
	st := sb.Setup
	src := api.Source{Type: api.SourceEmpty}
	if sb.Source != nil {
		src = *sb.Source
		src.AuthSecret = "" // the name of a secret is not what was cloned
	}
	secrets := make([]string, 0, len(st.Secrets))
	for k, v := range st.Secrets {
		secrets = append(secrets, k+"="+v)
	}
	slices.Sort(secrets)
	def := struct {
		Template string            `json:"template"`
		DiskMiB  int64             `json:"disk_mib"`
		Source   api.Source        `json:"source"`
		Command  string            `json:"command"`
		Env      map[string]string `json:"env"`
		Secrets  []string          `json:"secrets"`
		Network  []string          `json:"network"`
		TimeoutS int64             `json:"timeout_s"`
		Workdir  string            `json:"workdir"`
	}{sb.Template, sb.Resources.DiskMiB, src, st.Command, st.Env, secrets, sb.Network.SetupAllow, st.TimeoutS, sb.Workdir}
	b, _ := json.Marshal(def) // maps marshal sorted
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// cacheSaveID names a cache entry's save in the node's save store.
// Its files are owned in the host range of the sandbox that ran the setup,
// which the name carries, so that a sandbox woken from a copy moves them
// into its own range.
func cacheSaveID(teamID, key string, ids node.IDRange) string {
	sum := sha256.Sum256([]byte(teamID + "/" + key))
	return fmt.Sprintf("setup_%s_%d_%d", hex.EncodeToString(sum[:16]), ids.HostID, ids.Size)
}

// cacheSaveRange is the host range a cache entry's files are owned in.
func cacheSaveRange(saveID string) (node.IDRange, error) {
	parts := strings.Split(saveID, "_")
	if len(parts) != 4 {
		return node.IDRange{}, fmt.Errorf("setup cache save %q names no host range", saveID)
	}
	host, err1 := strconv.ParseUint(parts[2], 10, 32)
	size, err2 := strconv.ParseUint(parts[3], 10, 32)
	if err1 != nil || err2 != nil {
		return node.IDRange{}, fmt.Errorf("setup cache save %q names no host range", saveID)
	}
	return node.IDRange{HostID: uint32(host), Size: uint32(size)}, nil
}

// fromSetupCache starts a sandbox whose source has landed from the cached
// disk of its key, when there is one: its runtime is replaced by one
// woken from a copy of that disk. hit false means the setup must run.
func (s *Server) fromSetupCache(ctx context.Context, sb *api.Sandbox) (hit bool, err error) {
	key := setupKey(*sb)
	e, err := s.store.GetSetupCache(ctx, sb.TeamID, key)
	if api.ErrorCode(err) == api.CodeNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := s.node.DestroyRuntime(ctx, sb.ID); err != nil {
		return false, fmt.Errorf("replace the runtime with the cached setup: %w", err)
	}
	if _, err := s.node.CopySave(ctx, e.SaveID, sb.ID); err != nil {
		// The entry is unusable: drop it; this sandbox fails.
		s.dropCacheEntry(context.WithoutCancel(ctx), e)
		return false, fmt.Errorf("copy the cached setup: %w", err)
	}
	defer s.dropSave(ctx, sb.ID)
	spec, err := s.startSpec(ctx, *sb)
	if err != nil {
		return false, err
	}
	if spec.DiskIDs, err = cacheSaveRange(e.SaveID); err != nil {
		s.dropCacheEntry(context.WithoutCancel(ctx), e)
		return false, err
	}
	if err := s.node.Wake(ctx, spec); err != nil {
		return false, fmt.Errorf("start from the cached setup: %w", err)
	}
	if err := s.node.SetPolicy(sb.ID, sb.Network); err != nil {
		return false, fmt.Errorf("apply the network policy: %w", err)
	}
	if err := s.store.TouchSetupCache(ctx, sb.TeamID, key, s.now()); err != nil {
		s.log.Warn("touch setup cache entry", "key", key, "err", err)
	}
	s.log.Info("setup cache hit", "sandbox", sb.ID, "key", key)
	return true, s.updateProvision(ctx, sb, "", func(p *api.Provision) { p.SetupCached = true })
}

// saveSetupCache saves the disk of a sandbox whose setup just succeeded
// under its key: the sandbox is stopped, saved, its save copied into the
// cache, and it is woken again (processes the setup left do not survive,
// as with sleep). Then the team's cache is trimmed.
func (s *Server) saveSetupCache(ctx context.Context, sb *api.Sandbox) error {
	key := setupKey(*sb)
	spec, err := s.startSpec(ctx, *sb)
	if err != nil {
		return err
	}
	saveID := cacheSaveID(sb.TeamID, key, spec.IDs)
	s.loseCommands(context.WithoutCancel(ctx), sb.ID)
	if _, err := s.node.FinishSleep(ctx, sb.ID); err != nil {
		return fmt.Errorf("save the disk after setup: %w", err)
	}
	defer s.dropSave(ctx, sb.ID)
	info, cerr := s.node.CopySave(ctx, sb.ID, saveID)
	if err := s.node.Wake(ctx, spec); err != nil {
		if cerr == nil {
			s.dropSave(ctx, saveID)
		}
		return fmt.Errorf("start again after saving the setup: %w", err)
	}
	if err := s.node.SetPolicy(sb.ID, sb.Network); err != nil {
		return fmt.Errorf("apply the network policy: %w", err)
	}
	if cerr != nil {
		// The sandbox runs; only the cache missed out.
		s.log.Error("save setup cache entry", "sandbox", sb.ID, "err", cerr)
		return nil
	}
	now := s.now()
	e := store.SetupCacheEntry{TeamID: sb.TeamID, Key: key, SaveID: saveID, Size: info.ArchiveBytes, CreatedAt: now, LastUsedAt: now}
	if err := s.store.PutSetupCache(context.WithoutCancel(ctx), e); err != nil {
		s.dropSave(ctx, saveID)
		s.log.Error("record setup cache entry", "sandbox", sb.ID, "err", err)
		return nil
	}
	s.log.Info("setup cached", "sandbox", sb.ID, "key", key, "bytes", info.ArchiveBytes)
	s.trimSetupCache(context.WithoutCancel(ctx), sb.TeamID, key)
	return nil
}

// trimSetupCache evicts a team's least recently used entries (never keep,
// the one just made) while it has more than SetupCacheEntries or
// SetupCacheBytes.
func (s *Server) trimSetupCache(ctx context.Context, teamID, keep string) {
	entries, err := s.store.ListSetupCache(ctx, teamID)
	if err != nil {
		s.log.Error("list setup cache", "team", teamID, "err", err)
		return
	}
	var total int64
	for _, e := range entries {
		total += e.Size
	}
	n := len(entries)
	for _, e := range entries {
		if n <= s.cfg.SetupCacheEntries && total <= s.cfg.SetupCacheBytes {
			return
		}
		if e.Key == keep {
			continue
		}
		s.dropCacheEntry(ctx, e)
		n--
		total -= e.Size
	}
}

func (s *Server) dropCacheEntry(ctx context.Context, e store.SetupCacheEntry) {
	if err := s.store.DeleteSetupCache(ctx, e.TeamID, e.Key); err != nil && api.ErrorCode(err) != api.CodeNotFound {
		s.log.Error("delete setup cache entry", "key", e.Key, "err", err)
		return
	}
	s.dropSave(ctx, e.SaveID)
	s.log.Info("setup cache entry evicted", "team", e.TeamID, "key", e.Key)
}

func (s *Server) dropSave(ctx context.Context, id string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := s.node.DropSave(dctx, id); err != nil {
		s.log.Error("drop save", "save", id, "err", err)
	}
}
