package telemetry

import (
	"context"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// Store times the store's busiest calls (cove_store_seconds by op); the
// rest pass through untimed.
type Store struct {
	store.Store
	m *Metrics
}

// InstrumentStore returns st timed by m.
func (m *Metrics) InstrumentStore(st store.Store) *Store { return &Store{Store: st, m: m} }

var _ store.Store = (*Store)(nil)

func (s *Store) KeyByHash(ctx context.Context, hash string) (store.Key, api.Team, error) {
	defer s.m.observeStore("key_by_hash", s.m.beginStore())
	return s.Store.KeyByHash(ctx, hash)
}

func (s *Store) GetTeam(ctx context.Context, id string) (api.Team, error) {
	defer s.m.observeStore("get_team", s.m.beginStore())
	return s.Store.GetTeam(ctx, id)
}

func (s *Store) CreateSandbox(ctx context.Context, sb api.Sandbox) error {
	defer s.m.observeStore("create_sandbox", s.m.beginStore())
	return s.Store.CreateSandbox(ctx, sb)
}

func (s *Store) GetSandbox(ctx context.Context, teamID, id string) (api.Sandbox, error) {
	defer s.m.observeStore("get_sandbox", s.m.beginStore())
	return s.Store.GetSandbox(ctx, teamID, id)
}

func (s *Store) GetSandboxByName(ctx context.Context, teamID, name string) (api.Sandbox, error) {
	defer s.m.observeStore("get_sandbox_by_name", s.m.beginStore())
	return s.Store.GetSandboxByName(ctx, teamID, name)
}

func (s *Store) UpdateSandbox(ctx context.Context, sb api.Sandbox) error {
	defer s.m.observeStore("update_sandbox", s.m.beginStore())
	return s.Store.UpdateSandbox(ctx, sb)
}

func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]api.Sandbox, error) {
	defer s.m.observeStore("list_sandboxes", s.m.beginStore())
	return s.Store.ListSandboxes(ctx, f)
}

func (s *Store) CreateCommand(ctx context.Context, c api.Command) error {
	defer s.m.observeStore("create_command", s.m.beginStore())
	return s.Store.CreateCommand(ctx, c)
}

func (s *Store) GetCommand(ctx context.Context, sandboxID, id string) (api.Command, error) {
	defer s.m.observeStore("get_command", s.m.beginStore())
	return s.Store.GetCommand(ctx, sandboxID, id)
}

func (s *Store) UpdateCommand(ctx context.Context, c api.Command) error {
	defer s.m.observeStore("update_command", s.m.beginStore())
	return s.Store.UpdateCommand(ctx, c)
}

func (s *Store) CreateSandboxEvent(ctx context.Context, sb api.Sandbox, e api.Event) (api.Event, error) {
	defer s.m.observeStore("create_sandbox_event", s.m.beginStore())
	return s.Store.CreateSandboxEvent(ctx, sb, e)
}

func (s *Store) UpdateSandboxEvent(ctx context.Context, sb api.Sandbox, e api.Event) (api.Event, error) {
	defer s.m.observeStore("update_sandbox_event", s.m.beginStore())
	return s.Store.UpdateSandboxEvent(ctx, sb, e)
}

func (s *Store) UpdateCommandEvent(ctx context.Context, c api.Command, teamID string, e api.Event) (api.Event, error) {
	defer s.m.observeStore("update_command_event", s.m.beginStore())
	return s.Store.UpdateCommandEvent(ctx, c, teamID, e)
}

func (s *Store) ListCommands(ctx context.Context, f store.CommandFilter) ([]api.Command, error) {
	defer s.m.observeStore("list_commands", s.m.beginStore())
	return s.Store.ListCommands(ctx, f)
}

func (s *Store) AppendEvent(ctx context.Context, teamID string, e api.Event) (api.Event, error) {
	defer s.m.observeStore("append_event", s.m.beginStore())
	return s.Store.AppendEvent(ctx, teamID, e)
}

func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]api.Event, error) {
	defer s.m.observeStore("list_events", s.m.beginStore())
	return s.Store.ListEvents(ctx, f)
}

func (s *Store) DueDeliveries(ctx context.Context, t time.Time, perTeam int) ([]store.DueDelivery, error) {
	defer s.m.observeStore("due_deliveries", s.m.beginStore())
	return s.Store.DueDeliveries(ctx, t, perTeam)
}

func (s *Store) RecordAttempt(ctx context.Context, id string, a api.DeliveryAttempt, state api.DeliveryState, next *time.Time) error {
	defer s.m.observeStore("record_attempt", s.m.beginStore())
	return s.Store.RecordAttempt(ctx, id, a, state, next)
}

// SandboxCounts counts the live sandboxes of every team by state, from
// st, for cove_sandboxes.
func SandboxCounts(st store.Store) SandboxCounter {
	return func(ctx context.Context) (map[api.SandboxState]int, error) {
		sbs, err := st.ListSandboxes(ctx, store.SandboxFilter{States: liveStates})
		if err != nil {
			return nil, err
		}
		n := map[api.SandboxState]int{}
		for _, sb := range sbs {
			n[sb.State]++
		}
		return n, nil
	}
}
