package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// limits are the idle and lifetime limits: the last API call on each
// sandbox, in memory, and the check the background ticker makes.
type limits struct {
	s *Core

	mu       sync.Mutex
	activity map[string]time.Time // last API call per sandbox
	// persisted is the activity persist stored last, per sandbox.
	persisted map[string]time.Time
}

func newLimits(s *Core) *limits {
	return &limits{s: s, activity: map[string]time.Time{}, persisted: map[string]time.Time{}}
}

// touchAt records activity on a sandbox at t (the commands' exits).
func (s *Core) touchAt(id string, t time.Time) { s.limits.touch(id, t) }

// touch records activity on a sandbox at t.
func (l *limits) touch(id string, t time.Time) {
	l.mu.Lock()
	if t.After(l.activity[id]) {
		l.activity[id] = t
	}
	l.mu.Unlock()
}

// enforce applies max_lifetime_s to sandboxes running or in setup and
// idle_timeout_s to running ones, and persists their last activity.
func (l *limits) enforce(ctx context.Context) {
	s := l.s
	running, err := s.store.ListSandboxes(ctx, store.SandboxFilter{States: []api.SandboxState{api.StateRunning, api.StateSettingUp}})
	if err != nil {
		s.log.Error("list sandboxes for limits", "err", err)
		return
	}
	now := s.now()
	for _, sb := range running {
		expired := sb.ExpiresAt != nil && !now.Before(*sb.ExpiresAt)
		if sb.State == api.StateSettingUp {
			// A setup holds what a running sandbox holds, for up to its
			// own timeout: its lifetime bounds it too.
			if expired {
				reason := fmt.Sprintf("max_lifetime_s (%d s) reached during setup", sb.MaxLifetimeS)
				if s.failSetup(ctx, sb, reason) {
					s.svc.Events.Emit(ctx, sb.TeamID, "sandbox.expired", sb.ID, "", map[string]any{"max_lifetime_s": sb.MaxLifetimeS})
				}
			}
			continue
		}
		if expired {
			s.svc.Events.Emit(ctx, sb.TeamID, "sandbox.expired", sb.ID, "", map[string]any{"max_lifetime_s": sb.MaxLifetimeS})
			if _, err := s.TerminateSandbox(ctx, sb.TeamID, sb.ID); err != nil {
				s.log.Error("terminate at end of lifetime", "sandbox", sb.ID, "err", err)
			}
			continue
		}
		last := l.lastActive(ctx, sb, now)
		if sb.IdleTimeoutS > 0 && now.Sub(last) >= time.Duration(sb.IdleTimeoutS)*time.Second {
			s.svc.Events.Emit(ctx, sb.TeamID, "sandbox.idle", sb.ID, "", map[string]any{
				"idle_s": int64(now.Sub(last).Seconds()), "on_idle": sb.OnIdle,
			})
			var err error
			if sb.OnIdle == "terminate" {
				_, err = s.TerminateSandbox(ctx, sb.TeamID, sb.ID)
			} else {
				_, err = s.SleepSandbox(ctx, sb.TeamID, sb.ID, "idle for "+time.Duration(sb.IdleTimeoutS*int64(time.Second)).String())
			}
			if err != nil {
				s.log.Error("act on idle sandbox", "sandbox", sb.ID, "err", err)
			}
		}
	}
}

// lastActive is the sandbox's last activity: an API call on it, or now
// while any of its commands runs. It persists last_active_at when it moved.
func (l *limits) lastActive(ctx context.Context, sb api.Sandbox, now time.Time) time.Time {
	s := l.s
	last := sb.CreatedAt
	if sb.LastActiveAt != nil {
		last = *sb.LastActiveAt
	}
	l.mu.Lock()
	if t, ok := l.activity[sb.ID]; ok && t.After(last) {
		last = t
	}
	l.mu.Unlock()
	if ids, err := s.runningCommandIDs(ctx, sb.ID); err == nil && len(ids) > 0 {
		last = now
	}
	if sb.LastActiveAt == nil || last.After(*sb.LastActiveAt) {
		o := s.opsFor(sb.ID)
		o.mu.Lock()
		if err := l.persistOne(ctx, sb, last); err != nil {
			s.log.Warn("persist last activity", "sandbox", sb.ID, "err", err)
		}
		o.mu.Unlock()
	}
	return last
}

// persistOne records last as a running sandbox's last activity, reading the
// row again when another writer changed it meanwhile; a sandbox that no
// longer runs is left as it is. The caller holds its life-cycle lock.
func (l *limits) persistOne(ctx context.Context, sb api.Sandbox, last time.Time) error {
	for attempt := 1; ; attempt++ {
		cur, err := l.s.store.GetSandbox(ctx, sb.TeamID, sb.ID)
		if err != nil || cur.State != api.StateRunning {
			return err
		}
		if cur.LastActiveAt != nil && !last.After(*cur.LastActiveAt) {
			return nil // another replica saw later activity
		}
		cur.LastActiveAt = &last
		err = l.s.store.UpdateSandbox(ctx, cur)
		if !store.Stale(err) || attempt == store.UpdateAttempts {
			return err
		}
	}
}

// persist stores the last activity this replica saw on each running
// sandbox, when it moved since the last persist: the idle checks run on
// the leader alone, which knows of calls made through other replicas only
// from the store. Sandboxes no longer running are forgotten.
func (l *limits) persist(ctx context.Context) {
	s := l.s
	l.mu.Lock()
	moved := map[string]time.Time{}
	for id, t := range l.activity {
		if t.After(l.persisted[id]) {
			moved[id] = t
		}
	}
	l.mu.Unlock()
	for id, t := range moved {
		o := s.opsFor(id)
		o.mu.Lock()
		cur, err := s.store.GetSandbox(ctx, "", id)
		if err != nil || cur.State != api.StateRunning {
			l.forget(id)
		} else if err := l.persistOne(ctx, cur, t); err != nil {
			s.log.Warn("persist last activity", "sandbox", id, "err", err)
		} else {
			l.stored(id, t)
		}
		o.mu.Unlock()
	}
}

func (l *limits) stored(id string, t time.Time) {
	l.mu.Lock()
	l.persisted[id] = t
	l.mu.Unlock()
}

// forget drops what the limits keep of a sandbox that no longer runs.
func (l *limits) forget(id string) {
	l.mu.Lock()
	delete(l.activity, id)
	delete(l.persisted, id)
	l.mu.Unlock()
}
