// Package setupcache keeps, per team, the disk of a sandbox whose setup
// succeeded with setup.cache, under a key of what made it: the template,
// the disk size, the source's digest and the setup's definition. A create
// with the same key starts from that disk and skips the setup. Entries
// are evicted least recently used first once a team holds more than
// Config.Entries of them or more than Config.Bytes.
package setupcache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/store"
)

// Config bounds one team's cache.
type Config struct {
	Entries int
	Bytes   int64
}

// Store keeps the cache's entries.
type Store interface {
	PutSetupCache(ctx context.Context, e store.SetupCacheEntry) error
	GetSetupCache(ctx context.Context, teamID, key string) (store.SetupCacheEntry, error)
	TouchSetupCache(ctx context.Context, teamID, key string, t time.Time) error
	ListSetupCache(ctx context.Context, teamID string) ([]store.SetupCacheEntry, error)
	DeleteSetupCache(ctx context.Context, teamID, key string) error
}

// Node saves, copies and wakes the sandboxes' disks.
type Node interface {
	Wake(ctx context.Context, spec node.SandboxSpec) error
	DestroyRuntime(ctx context.Context, id string) error
	FinishSleep(ctx context.Context, id string) (node.SaveInfo, error)
	DropSave(ctx context.Context, id string) error
	CopySave(ctx context.Context, from, to string) (node.SaveInfo, error)
	SetPolicy(id string, p api.NetworkPolicy) error
}

// Core is what the cache asks of the sandbox life cycle.
type Core interface {
	// StartSpec is the node's spec to start (or wake) the sandbox.
	StartSpec(ctx context.Context, sb api.Sandbox) (node.SandboxSpec, error)
	// LoseCommands marks the sandbox's running commands lost.
	LoseCommands(ctx context.Context, sandboxID string)
}

// Cache is the setup cache.
type Cache struct {
	cfg  Config
	st   Store
	nd   Node
	core Core
	now  func() time.Time
	log  *slog.Logger
}

// New returns the cache over st and nd; now is its clock.
func New(cfg Config, st Store, nd Node, core Core, now func() time.Time, log *slog.Logger) *Cache {
	return &Cache{cfg: cfg, st: st, nd: nd, core: core, now: now, log: log}
}

// Key is the cache key of a sandbox whose source has landed.
func Key(sb api.Sandbox) string {
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

// saveID names a cache entry's save in the node's save store.
// Its files are owned in the host range of the sandbox that ran the setup,
// which the name carries, so that a sandbox woken from a copy moves them
// into its own range.
func saveID(teamID, key string, ids node.IDRange) string {
	sum := sha256.Sum256([]byte(teamID + "/" + key))
	return fmt.Sprintf("setup_%s_%d_%d", hex.EncodeToString(sum[:16]), ids.HostID, ids.Size)
}

// saveRange is the host range a cache entry's files are owned in.
func saveRange(saveID string) (node.IDRange, error) {
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

// Start starts a sandbox whose source has landed from the cached disk of
// its key, when there is one: its runtime is replaced by one woken from a
// copy of that disk. hit false means the setup must run; on a hit the
// caller records that the sandbox came from the cache.
func (s *Cache) Start(ctx context.Context, sb *api.Sandbox) (hit bool, err error) {
	key := Key(*sb)
	e, err := s.st.GetSetupCache(ctx, sb.TeamID, key)
	if api.ErrorCode(err) == api.CodeNotFound {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := s.nd.DestroyRuntime(ctx, sb.ID); err != nil {
		return false, fmt.Errorf("replace the runtime with the cached setup: %w", err)
	}
	if _, err := s.nd.CopySave(ctx, e.SaveID, sb.ID); err != nil {
		// The entry is unusable: drop it; this sandbox fails.
		s.dropEntry(context.WithoutCancel(ctx), e)
		return false, fmt.Errorf("copy the cached setup: %w", err)
	}
	defer s.dropSave(ctx, sb.ID)
	spec, err := s.core.StartSpec(ctx, *sb)
	if err != nil {
		return false, err
	}
	if spec.DiskIDs, err = saveRange(e.SaveID); err != nil {
		s.dropEntry(context.WithoutCancel(ctx), e)
		return false, err
	}
	if err := s.nd.Wake(ctx, spec); err != nil {
		return false, fmt.Errorf("start from the cached setup: %w", err)
	}
	if err := s.nd.SetPolicy(sb.ID, sb.Network); err != nil {
		return false, fmt.Errorf("apply the network policy: %w", err)
	}
	if err := s.st.TouchSetupCache(ctx, sb.TeamID, key, s.now()); err != nil {
		s.log.Warn("touch setup cache entry", "key", key, "err", err)
	}
	s.log.Info("setup cache hit", "sandbox", sb.ID, "key", key)
	return true, nil
}

// Save saves the disk of a sandbox whose setup just succeeded
// under its key: the sandbox is stopped, saved, its save copied into the
// cache, and it is woken again (processes the setup left do not survive,
// as with sleep). Then the team's cache is trimmed.
func (s *Cache) Save(ctx context.Context, sb *api.Sandbox) error {
	key := Key(*sb)
	spec, err := s.core.StartSpec(ctx, *sb)
	if err != nil {
		return err
	}
	id := saveID(sb.TeamID, key, spec.IDs)
	s.core.LoseCommands(context.WithoutCancel(ctx), sb.ID)
	if _, err := s.nd.FinishSleep(ctx, sb.ID); err != nil {
		return fmt.Errorf("save the disk after setup: %w", err)
	}
	defer s.dropSave(ctx, sb.ID)
	info, cerr := s.nd.CopySave(ctx, sb.ID, id)
	if err := s.nd.Wake(ctx, spec); err != nil {
		if cerr == nil {
			s.dropSave(ctx, id)
		}
		return fmt.Errorf("start again after saving the setup: %w", err)
	}
	if err := s.nd.SetPolicy(sb.ID, sb.Network); err != nil {
		return fmt.Errorf("apply the network policy: %w", err)
	}
	if cerr != nil {
		// The sandbox runs; only the cache missed out.
		s.log.Error("save setup cache entry", "sandbox", sb.ID, "err", cerr)
		return nil
	}
	now := s.now()
	e := store.SetupCacheEntry{TeamID: sb.TeamID, Key: key, SaveID: id, Size: info.ArchiveBytes, CreatedAt: now, LastUsedAt: now}
	if err := s.st.PutSetupCache(context.WithoutCancel(ctx), e); err != nil {
		s.dropSave(ctx, id)
		s.log.Error("record setup cache entry", "sandbox", sb.ID, "err", err)
		return nil
	}
	s.log.Info("setup cached", "sandbox", sb.ID, "key", key, "bytes", info.ArchiveBytes)
	s.trim(context.WithoutCancel(ctx), sb.TeamID, key)
	return nil
}

// trim evicts a team's least recently used entries (never keep,
// the one just made) while it has more than SetupCacheEntries or
// SetupCacheBytes.
func (s *Cache) trim(ctx context.Context, teamID, keep string) {
	entries, err := s.st.ListSetupCache(ctx, teamID)
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
		if n <= s.cfg.Entries && total <= s.cfg.Bytes {
			return
		}
		if e.Key == keep {
			continue
		}
		s.dropEntry(ctx, e)
		n--
		total -= e.Size
	}
}

func (s *Cache) dropEntry(ctx context.Context, e store.SetupCacheEntry) {
	if err := s.st.DeleteSetupCache(ctx, e.TeamID, e.Key); err != nil && api.ErrorCode(err) != api.CodeNotFound {
		s.log.Error("delete setup cache entry", "key", e.Key, "err", err)
		return
	}
	s.dropSave(ctx, e.SaveID)
	s.log.Info("setup cache entry evicted", "team", e.TeamID, "key", e.Key)
}

func (s *Cache) dropSave(ctx context.Context, id string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := s.nd.DropSave(dctx, id); err != nil {
		s.log.Error("drop save", "save", id, "err", err)
	}
}
