// Package storetest is the conformance suite every store.Store passes.
package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// Run runs the suite; open returns a new, empty store for each subtest and
// arranges for it to be closed when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"Teams", testTeams},
		{"Keys", testKeys},
		{"SandboxRoundTrip", testSandboxRoundTrip},
		{"SandboxEmptyFields", testSandboxEmptyFields},
		{"SandboxTeamIsolation", testSandboxTeamIsolation},
		{"SandboxNames", testSandboxNames},
		{"ListSandboxes", testListSandboxes},
		{"SandboxPaging", testSandboxPaging},
		{"CommandRoundTrip", testCommandRoundTrip},
		{"ListCommands", testListCommands},
		{"UpdateCommandEvent", testUpdateCommandEvent},
		{"SandboxEvents", testSandboxEvents},
		{"Events", testEvents},
		{"Idempotency", testIdempotency},
		{"EventExpiry", testEventExpiry},
		{"Secrets", testSecrets},
		{"Samples", testSamples}, {"Usage", testUsage}, {"Budgets", testBudgets},
		{"IDRanges", testIDRanges},
		{"Sources", testSources}, {"Snapshots", testSnapshots}, {"Volumes", testVolumes},
		{"Observations", testObservations}, {"ObservationBound", testObservationBound}, {"ObservationExpiry", testObservationExpiry},
		{"Webhooks", testWebhooks},
		{"WebhookOutbox", testWebhookOutbox},
		{"WebhookDueByTeam", testWebhookDueByTeam},
		{"WebhookBacklog", testWebhookBacklog},
		{"Previews", testPreviews},
		{"Images", testImages},
		{"TeamAdmission", testTeamAdmission},
		{"Workloads", testWorkloads},
		{"WorkloadUsage", testWorkloadUsage},
		{"Versions", testVersions}, {"IdempotencyRef", testIdempotencyRef}, {"SetID", testSetID},
		{"Nodes", testNodes}, {"NodeJoinHash", testNodeJoinHash}, {"Placements", testPlacements}, {"FleetValues", testFleetValues},
		{"Leases", testLeases}, {"Replicas", testReplicas}, {"AccrueConditional", testAccrueConditional}, {"SandboxOwners", testSandboxOwners}, {"PruneReplicas", testPruneReplicas}, {"PruneSandboxOwners", testPruneSandboxOwners}, {"NUL", testNUL}, {"ClaimDelivery", testClaimDelivery},
	}
	tests = append(tests, fleetSharedTests...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, open(t))
		})
	}
}

// at is a time n seconds after a fixed instant, outside UTC and with
// microseconds, the precision every store must keep.
func at(n int) time.Time {
	return time.Date(2025, 3, 1, 12, 0, n, 123456000, time.FixedZone("CET", 3600))
}

func ptr[T any](v T) *T { return &v }

func wantCode(t *testing.T, err error, code api.Code) {
	t.Helper()
	if got := api.ErrorCode(err); got != code {
		t.Fatalf("error = %v; want code %q", err, code)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustGet[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func diff(t *testing.T, what string, want, got any) {
	t.Helper()
	// Slices and maps come back non-nil: an empty one is what a nil one
	// in a test's want means.
	if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
}

func createTeam(t *testing.T, s store.Store, id string) api.Team {
	t.Helper()
	team := api.Team{ID: id, Name: "name-" + id, CreatedAt: at(0)}
	mustDo(t, s.CreateTeam(t.Context(), team))
	return team
}

// sandbox is a minimal sandbox; n orders IDs and creation times alike.
func sandbox(team string, n int, name string, state api.SandboxState) api.Sandbox {
	return api.Sandbox{
		ID:        fmt.Sprintf("sbx_%04d", n),
		TeamID:    team,
		Name:      name,
		State:     state,
		CreatedAt: at(n),
		Labels:    map[string]string{},
		Env:       map[string]string{},
		Secrets:   map[string]string{},
		Network:   api.NetworkPolicy{Allow: []string{}},
	}
}

// createSandbox stores sb and returns it as stored: at version 1.
func createSandbox(t *testing.T, s store.Store, sb api.Sandbox) api.Sandbox {
	t.Helper()
	mustDo(t, s.CreateSandbox(t.Context(), sb))
	sb.Version = 1
	return sb
}

func sandboxIDs(ss []api.Sandbox) []string {
	ids := []string{}
	for _, s := range ss {
		ids = append(ids, s.ID)
	}
	return ids
}

func commandIDs(cs []api.Command) []string {
	ids := []string{}
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}

func testTeams(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := api.Team{ID: "team_a", Name: "alpha", Admission: api.Admission{ManagedEnvironment: true, Preview: true}, CreatedAt: at(1)}
	b := api.Team{ID: "team_b", Name: "beta", CreatedAt: at(2)}
	mustDo(t, s.CreateTeam(ctx, b))
	mustDo(t, s.CreateTeam(ctx, a))

	got := mustGet[api.Team](t)(s.GetTeam(ctx, a.ID))
	diff(t, "GetTeam", a, got)
	if got.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt location = %v; want UTC", got.CreatedAt.Location())
	}
	diff(t, "GetTeamByName", b, mustGet[api.Team](t)(s.GetTeamByName(ctx, "beta")))
	diff(t, "ListTeams", []api.Team{a, b}, mustGet[[]api.Team](t)(s.ListTeams(ctx)))

	wantCode(t, s.CreateTeam(ctx, api.Team{ID: "team_c", Name: "alpha", CreatedAt: at(3)}), api.CodeConflict)
	wantCode(t, s.CreateTeam(ctx, api.Team{ID: "team_a", Name: "gamma", CreatedAt: at(3)}), api.CodeConflict)
	_, err := s.GetTeam(ctx, "team_missing")
	wantCode(t, err, api.CodeNotFound)
	_, err = s.GetTeamByName(ctx, "missing")
	wantCode(t, err, api.CodeNotFound)
}

func testKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	k1 := store.Key{ID: "key_1", TeamID: "team_a", Hash: "hash1", CreatedAt: at(1)}
	k2 := store.Key{ID: "key_2", TeamID: "team_a", Hash: "hash2", CreatedAt: at(2)}
	mustDo(t, s.CreateKey(ctx, k1))
	mustDo(t, s.CreateKey(ctx, k2))
	// A team of every field, for the key's team read with it.
	limit := 12.5
	teamB := api.Team{ID: "team_b", Name: "b", CreatedAt: at(4), SpendLimitUSD: &limit, BudgetAlerts: []float64{0.5, 0.9},
		Admission: api.Admission{ManagedEnvironment: true, Preview: true}}
	mustDo(t, s.CreateTeam(ctx, teamB))
	k5 := store.Key{ID: "key_5", TeamID: "team_b", Hash: "hash5", CreatedAt: at(5)}
	mustDo(t, s.CreateKey(ctx, k5))
	byHash := func(hash string) (store.Key, api.Team) {
		t.Helper()
		k, team, err := s.KeyByHash(ctx, hash)
		if err != nil {
			t.Fatalf("KeyByHash(%s): %v", hash, err)
		}
		return k, team
	}
	k, team := byHash("hash1")
	diff(t, "KeyByHash", k1, k)
	diff(t, "KeyByHash's team", mustGet[api.Team](t)(s.GetTeam(ctx, "team_a")), team)
	k, team = byHash("hash5")
	diff(t, "KeyByHash of another team", k5, k)
	diff(t, "KeyByHash's team of every field", teamB, team)

	wantCode(t, s.CreateKey(ctx, store.Key{ID: "key_3", TeamID: "team_a", Hash: "hash1", CreatedAt: at(3)}), api.CodeConflict)
	wantCode(t, s.CreateKey(ctx, store.Key{ID: "key_4", TeamID: "team_missing", Hash: "hash4", CreatedAt: at(3)}), api.CodeNotFound)
	_, _, err := s.KeyByHash(ctx, "nope")
	wantCode(t, err, api.CodeNotFound)

	mustDo(t, s.RevokeKey(ctx, "key_1"))
	_, _, err = s.KeyByHash(ctx, "hash1")
	wantCode(t, err, api.CodeNotFound)
	mustDo(t, s.RevokeKey(ctx, "key_1")) // revoking twice is no error
	wantCode(t, s.RevokeKey(ctx, "key_missing"), api.CodeNotFound)
	k, _ = byHash("hash2")
	diff(t, "other key", k2, k)

	revoked := mustGet[store.Key](t)(s.GetKey(ctx, "key_1"))
	if revoked.RevokedAt == nil || revoked.TeamID != "team_a" {
		t.Errorf("GetKey of a revoked key = %+v, want it with RevokedAt set", revoked)
	}
	_, err = s.GetKey(ctx, "key_missing")
	wantCode(t, err, api.CodeNotFound)
}

func testSandboxRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	want := api.Sandbox{
		ID:            "sbx_1",
		Name:          "fix-issue-42",
		TeamID:        "team_a",
		Template:      "managed",
		State:         api.StateRunning,
		Resources:     api.Resources{CPUs: 1.5, MemoryMiB: 1024, DiskMiB: 4096},
		Env:           map[string]string{"FOO": "bar", "EMPTY": ""},
		Secrets:       map[string]string{"GITHUB_TOKEN": "github-token"},
		Workdir:       "/workspace",
		Network:       api.NetworkPolicy{Allow: []string{"api.github.com", "*.pythonhosted.org:443"}},
		Labels:        map[string]string{"ticket": "42", "a.b": "c"},
		IdleTimeoutS:  900,
		OnIdle:        "sleep",
		MaxLifetimeS:  86400,
		SpendLimitUSD: ptr(5.25),
		CostUSD:       0.125,
		CreatedAt:     at(1),
		StartedAt:     ptr(at(2)),
		LastActiveAt:  ptr(at(3)),
		ExpiresAt:     ptr(at(4)),
		StateReason:   "started",
	}
	mustDo(t, s.CreateSandbox(ctx, want))
	want.Version = 1
	got := mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", "sbx_1"))
	diff(t, "created sandbox", want, got)
	if got.CreatedAt.Location() != time.UTC || got.StartedAt.Location() != time.UTC {
		t.Errorf("times not in UTC: %v, %v", got.CreatedAt, got.StartedAt)
	}

	want = api.Sandbox{
		ID:            "sbx_1",
		Name:          "renamed",
		TeamID:        "team_a",
		Template:      "other",
		State:         api.StateAsleep,
		Resources:     api.Resources{CPUs: 2, MemoryMiB: 2048, DiskMiB: 8192},
		Env:           map[string]string{"BAR": "baz"},
		Secrets:       map[string]string{},
		Workdir:       "/home",
		Network:       api.NetworkPolicy{Allow: []string{"192.0.2.0/24:5432"}},
		Labels:        map[string]string{"ticket": "43"},
		IdleTimeoutS:  60,
		OnIdle:        "terminate",
		MaxLifetimeS:  3600,
		SpendLimitUSD: ptr(0.0),
		CostUSD:       0.125, // the meter's (AccrueUsage): an update keeps it
		OnBudget:      "terminate",
		BudgetAlerts:  []float64{25, 90},
		CreatedAt:     at(5),
		StartedAt:     ptr(at(6)),
		LastActiveAt:  ptr(at(7)),
		ExpiresAt:     ptr(at(8)),
		StateReason:   "idle",
		Version:       1,
	}
	mustDo(t, s.UpdateSandbox(ctx, want))
	want.Version++
	diff(t, "updated sandbox", want, mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", "sbx_1")))

	want.SpendLimitUSD, want.StartedAt, want.LastActiveAt, want.ExpiresAt = nil, nil, nil, nil
	mustDo(t, s.UpdateSandbox(ctx, want))
	want.Version++
	diff(t, "sandbox with nil pointers", want, mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", "sbx_1")))

	wantCode(t, s.CreateSandbox(ctx, want), api.CodeConflict)
	_, err := s.GetSandbox(ctx, "team_a", "sbx_missing")
	wantCode(t, err, api.CodeNotFound)
	missing := want
	missing.ID = "sbx_missing"
	wantCode(t, s.UpdateSandbox(ctx, missing), api.CodeNotFound)
}

// testSandboxEmptyFields checks that nil maps and slices come back empty.
func testSandboxEmptyFields(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	mustDo(t, s.CreateSandbox(ctx, api.Sandbox{ID: "sbx_1", TeamID: "team_a", State: api.StateCreating, CreatedAt: at(1)}))
	want := api.Sandbox{
		ID: "sbx_1", TeamID: "team_a", State: api.StateCreating, CreatedAt: at(1),
		Labels: map[string]string{}, Env: map[string]string{}, Network: api.NetworkPolicy{Allow: []string{}},
		Secrets: map[string]string{}, Version: 1,
	}
	// cmp tells nil from empty maps and slices.
	diff(t, "sandbox", want, mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", "sbx_1")))
}

func testSandboxTeamIsolation(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	a := createSandbox(t, s, sandbox("team_a", 1, "web", api.StateRunning))
	b := createSandbox(t, s, sandbox("team_b", 2, "web", api.StateRunning)) // same name, other team

	_, err := s.GetSandbox(ctx, "team_b", a.ID)
	wantCode(t, err, api.CodeNotFound)
	diff(t, "any team", a, mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "", a.ID)))
	diff(t, "by name in team_b", b, mustGet[api.Sandbox](t)(s.GetSandboxByName(ctx, "team_b", "web")))
	moved := a
	moved.TeamID = "team_b"
	wantCode(t, s.UpdateSandbox(ctx, moved), api.CodeNotFound)
	diff(t, "team_a list", []string{a.ID}, sandboxIDs(mustGet[[]api.Sandbox](t)(s.ListSandboxes(ctx, store.SandboxFilter{TeamID: "team_a"}))))
	diff(t, "all teams list", []string{a.ID, b.ID}, sandboxIDs(mustGet[[]api.Sandbox](t)(s.ListSandboxes(ctx, store.SandboxFilter{}))))
	wantCode(t, s.CreateSandbox(ctx, sandbox("team_missing", 3, "", api.StateCreating)), api.CodeNotFound)
}

func testSandboxNames(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	byName := func(name string) string {
		t.Helper()
		return mustGet[api.Sandbox](t)(s.GetSandboxByName(ctx, "team_a", name)).ID
	}
	setState := func(sb *api.Sandbox, state api.SandboxState) error {
		sb.State = state
		err := s.UpdateSandbox(ctx, *sb)
		if err == nil {
			sb.Version++
		}
		return err
	}

	s1 := createSandbox(t, s, sandbox("team_a", 1, "web", api.StateRunning))
	wantCode(t, s.CreateSandbox(ctx, sandbox("team_a", 2, "web", api.StateCreating)), api.CodeConflict)
	createSandbox(t, s, sandbox("team_a", 3, "", api.StateRunning)) // unnamed ones never clash
	createSandbox(t, s, sandbox("team_a", 4, "", api.StateRunning))
	diff(t, "by name", s1.ID, byName("web"))

	mustDo(t, setState(&s1, api.StateTerminated))
	s5 := createSandbox(t, s, sandbox("team_a", 5, "web", api.StateCreating)) // the name is free again
	diff(t, "live one", s5.ID, byName("web"))
	s6 := createSandbox(t, s, sandbox("team_a", 6, "web", api.StateFailed)) // newer but terminal
	diff(t, "live one over newer terminal", s5.ID, byName("web"))

	wantCode(t, setState(&s1, api.StateRunning), api.CodeConflict) // reviving would clash
	s7 := createSandbox(t, s, sandbox("team_a", 7, "api", api.StateRunning))
	s7.Name = "web"
	wantCode(t, s.UpdateSandbox(ctx, s7), api.CodeConflict) // so would renaming

	mustDo(t, setState(&s5, api.StateFailed))
	diff(t, "newest terminal", s6.ID, byName("web"))
	_, err := s.GetSandboxByName(ctx, "team_a", "missing")
	wantCode(t, err, api.CodeNotFound)
}

func testListSandboxes(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	add := func(team string, n int, state api.SandboxState, labels map[string]string) {
		sb := sandbox(team, n, "", state)
		sb.Labels = labels
		createSandbox(t, s, sb)
	}
	add("team_a", 1, api.StateRunning, map[string]string{"env": "prod", "tier": "web"})
	add("team_b", 2, api.StateRunning, map[string]string{"env": "prod"})
	add("team_a", 3, api.StateAsleep, map[string]string{"env": "prod"})
	add("team_a", 4, api.StateTerminated, map[string]string{"env": "dev", "tier": "web"})
	add("team_a", 5, api.StateFailed, map[string]string{"a.b": "1", `q"uote`: "2"})

	tests := []struct {
		name   string
		filter store.SandboxFilter
		want   []string
	}{
		{"team", store.SandboxFilter{TeamID: "team_a"}, []string{"sbx_0001", "sbx_0003", "sbx_0004", "sbx_0005"}},
		{"all teams", store.SandboxFilter{}, []string{"sbx_0001", "sbx_0002", "sbx_0003", "sbx_0004", "sbx_0005"}},
		{"one state", store.SandboxFilter{TeamID: "team_a", States: []api.SandboxState{api.StateRunning}}, []string{"sbx_0001"}},
		{"two states", store.SandboxFilter{TeamID: "team_a", States: []api.SandboxState{api.StateTerminated, api.StateFailed}}, []string{"sbx_0004", "sbx_0005"}},
		{"one label", store.SandboxFilter{TeamID: "team_a", Labels: map[string]string{"env": "prod"}}, []string{"sbx_0001", "sbx_0003"}},
		{"every label", store.SandboxFilter{TeamID: "team_a", Labels: map[string]string{"env": "prod", "tier": "web"}}, []string{"sbx_0001"}},
		{"label all teams", store.SandboxFilter{Labels: map[string]string{"env": "prod"}}, []string{"sbx_0001", "sbx_0002", "sbx_0003"}},
		{"label no match", store.SandboxFilter{Labels: map[string]string{"env": "staging"}}, []string{}},
		{"odd label keys", store.SandboxFilter{Labels: map[string]string{"a.b": "1", `q"uote`: "2"}}, []string{"sbx_0005"}},
		{"label and state", store.SandboxFilter{Labels: map[string]string{"env": "prod"}, States: []api.SandboxState{api.StateAsleep}}, []string{"sbx_0003"}},
		{"missing team", store.SandboxFilter{TeamID: "team_c"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ListSandboxes(ctx, tt.filter)
			mustDo(t, err)
			diff(t, "IDs", tt.want, sandboxIDs(got))
		})
	}
}

func testSandboxPaging(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	var all, running []string
	for n := range 10 {
		team, state := "team_a", api.StateRunning
		if n%4 == 3 {
			team = "team_b"
		}
		if n%2 == 1 {
			state = api.StateAsleep
		}
		sb := createSandbox(t, s, sandbox(team, n, "", state))
		if team == "team_a" {
			all = append(all, sb.ID)
			if state == api.StateRunning {
				running = append(running, sb.ID)
			}
		}
	}

	tests := []struct {
		name   string
		filter store.SandboxFilter
		want   []string
	}{
		{"team", store.SandboxFilter{TeamID: "team_a"}, all},
		{"state", store.SandboxFilter{TeamID: "team_a", States: []api.SandboxState{api.StateRunning}}, running},
	}
	for _, tt := range tests {
		for _, limit := range []int{1, 2, 3, 100} {
			t.Run(fmt.Sprintf("%s/limit=%d", tt.name, limit), func(t *testing.T) {
				f := tt.filter
				f.Limit = limit
				got := []string{}
				for range len(tt.want) + 1 {
					page, err := s.ListSandboxes(ctx, f)
					mustDo(t, err)
					if len(page) > limit {
						t.Fatalf("page of %d > limit %d", len(page), limit)
					}
					got = append(got, sandboxIDs(page)...)
					if len(page) < limit {
						break
					}
					f.After = page[len(page)-1].ID
				}
				diff(t, "paged IDs", tt.want, got)
			})
		}
	}
	t.Run("after without limit", func(t *testing.T) {
		got := mustGet[[]api.Sandbox](t)(s.ListSandboxes(ctx, store.SandboxFilter{TeamID: "team_a", After: all[2]}))
		diff(t, "IDs", all[3:], sandboxIDs(got))
	})
}

func command(sandboxID string, n int, state api.CommandState) api.Command {
	return api.Command{
		ID:        fmt.Sprintf("cmd_%04d", n),
		SandboxID: sandboxID,
		Command:   "true",
		Argv:      []string{},
		Env:       map[string]string{},
		Secrets:   map[string]string{},
		State:     state,
		StartedAt: at(n),
	}
}

func testCommandRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	sb := createSandbox(t, s, sandbox("team_a", 1, "", api.StateRunning))
	other := createSandbox(t, s, sandbox("team_a", 2, "", api.StateRunning))

	want := api.Command{
		ID:             "cmd_1",
		SandboxID:      sb.ID,
		Argv:           []string{"python", "-c", "print(1)"},
		Cwd:            "/workspace",
		Env:            map[string]string{"A": "1"},
		Secrets:        map[string]string{"TOKEN": "tok"},
		User:           "agent",
		TimeoutS:       60,
		Stdin:          true,
		PTY:            &api.PTY{Cols: 80, Rows: 24},
		NoOutputAlertS: 30,
		State:          api.CommandRunning,
		StartedAt:      at(3),
		Tag:            "start-cmd",
	}
	mustDo(t, s.CreateCommand(ctx, want))
	want.Version = 1
	diff(t, "created command", want, mustGet[api.Command](t)(s.GetCommand(ctx, sb.ID, want.ID)))
	// The pid comes once the command runs, an update of the stored row.
	want.PID = 73
	mustDo(t, s.UpdateCommand(ctx, want))
	want.Version++
	diff(t, "started command", want, mustGet[api.Command](t)(s.GetCommand(ctx, sb.ID, want.ID)))

	want = api.Command{
		ID:             "cmd_1",
		SandboxID:      sb.ID,
		Command:        "make test",
		Argv:           []string{"sh", "-c", "make test"},
		Cwd:            "/tmp",
		Env:            map[string]string{"B": "2"},
		Secrets:        map[string]string{"NEW": "other"},
		User:           "root",
		TimeoutS:       120,
		NoOutputAlertS: 0,
		State:          api.CommandTimedOut,
		ExitCode:       ptr(0),
		Signal:         "KILL",
		TimedOut:       true,
		StartedAt:      at(4),
		EndedAt:        ptr(at(5)),
		StdoutBytes:    1 << 40,
		StderrBytes:    7,
		// The largest pid Linux gives (pid_max's limit, 2^22).
		PID:     4194304,
		Tag:     "ünïcode tag",
		Version: 2,
	}
	mustDo(t, s.UpdateCommand(ctx, want))
	want.Version++
	diff(t, "updated command", want, mustGet[api.Command](t)(s.GetCommand(ctx, sb.ID, want.ID)))

	minimal := api.Command{ID: "cmd_2", SandboxID: sb.ID, State: api.CommandRunning, StartedAt: at(6)}
	mustDo(t, s.CreateCommand(ctx, minimal))
	got := mustGet[api.Command](t)(s.GetCommand(ctx, sb.ID, "cmd_2"))
	if got.Argv == nil || got.Env == nil || got.PTY != nil || got.ExitCode != nil || got.EndedAt != nil || got.PID != 0 || got.Tag != "" {
		t.Errorf("minimal command = %+v; want empty argv and env, nil pointers, no pid", got)
	}

	_, err := s.GetCommand(ctx, other.ID, want.ID)
	wantCode(t, err, api.CodeNotFound)
	moved := want
	moved.SandboxID = other.ID
	wantCode(t, s.UpdateCommand(ctx, moved), api.CodeNotFound)
	missing := want
	missing.ID = "cmd_missing"
	wantCode(t, s.UpdateCommand(ctx, missing), api.CodeNotFound)
	wantCode(t, s.CreateCommand(ctx, want), api.CodeConflict)
	wantCode(t, s.CreateCommand(ctx, command("sbx_missing", 9, api.CommandRunning)), api.CodeNotFound)
}

// testUpdateCommandEvent: a command's update and its event (with the
// webhook deliveries it makes) are stored together; a stale or missing
// command stores neither, and an event of a missing team leaves the
// command as it was.
func testUpdateCommandEvent(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	sb := createSandbox(t, s, sandbox("team_a", 1, "", api.StateRunning))
	mustDo(t, s.CreateWebhook(ctx, webhook("team_a", "whk_cmd", "command.*")))
	c := command(sb.ID, 1, api.CommandRunning)
	mustDo(t, s.CreateCommand(ctx, c))
	c.Version = 1
	before, err := s.AppendEvent(ctx, "team_a", api.Event{Type: "sandbox.running", SandboxID: sb.ID, Time: at(1)})
	mustDo(t, err)

	c.PID = 42
	e, err := s.UpdateCommandEvent(ctx, c, "team_a", api.Event{Type: "command.started", SandboxID: sb.ID, CommandID: c.ID,
		Time: at(2), Data: map[string]any{"argv": []any{"true"}}})
	mustDo(t, err)
	c.Version++
	if e.ID <= before.ID {
		t.Errorf("event ID %s does not sort after %s", e.ID, before.ID)
	}
	diff(t, "stored command", c, mustGet[api.Command](t)(s.GetCommand(ctx, sb.ID, c.ID)))
	want := api.Event{ID: e.ID, Type: "command.started", SandboxID: sb.ID, CommandID: c.ID, Time: at(2).UTC(),
		Data: map[string]any{"argv": []any{"true"}}}
	diff(t, "returned event", want, e)
	diff(t, "listed events", []api.Event{want},
		mustGet[[]api.Event](t)(s.ListEvents(ctx, store.EventFilter{TeamID: "team_a", After: before.ID})))
	if l := mustGet[[]api.Delivery](t)(s.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: "whk_cmd"})); len(l) != 1 || l[0].EventID != e.ID {
		t.Errorf("deliveries = %+v; want one of %s", l, e.ID)
	}
	// A nil data is stored empty.
	c.State, c.EndedAt, c.ExitCode = api.CommandExited, ptr(at(3)), ptr(0)
	e, err = s.UpdateCommandEvent(ctx, c, "team_a", api.Event{Type: "command.exited", SandboxID: sb.ID, CommandID: c.ID, Time: at(3)})
	mustDo(t, err)
	c.Version++
	if e.Data == nil {
		t.Error("an event without data came back with nil data")
	}

	count := func() int {
		return len(mustGet[[]api.Event](t)(s.ListEvents(ctx, store.EventFilter{TeamID: "team_a"})))
	}
	n := count()
	stale := c
	stale.Version--
	stale.State = api.CommandLost
	_, err = s.UpdateCommandEvent(ctx, stale, "team_a", api.Event{Type: "command.exited", SandboxID: sb.ID, CommandID: c.ID, Time: at(4)})
	wantCode(t, err, api.CodeConflict)
	missing := c
	missing.ID = "cmd_missing"
	_, err = s.UpdateCommandEvent(ctx, missing, "team_a", api.Event{Type: "command.exited", SandboxID: sb.ID, CommandID: missing.ID, Time: at(4)})
	wantCode(t, err, api.CodeNotFound)
	noTeam := c
	noTeam.State = api.CommandLost
	_, err = s.UpdateCommandEvent(ctx, noTeam, "team_missing", api.Event{Type: "command.exited", SandboxID: sb.ID, CommandID: c.ID, Time: at(4)})
	wantCode(t, err, api.CodeNotFound)
	if got := count(); got != n {
		t.Errorf("%d events after the refused updates, want %d", got, n)
	}
	diff(t, "command after the refused updates", c, mustGet[api.Command](t)(s.GetCommand(ctx, sb.ID, c.ID)))
}

// testSandboxEvents: a sandbox's creation or update and its event (with
// the webhook deliveries it makes) are stored together; a refused
// create (a live name taken, a missing team) or a stale or missing
// sandbox stores neither.
func testSandboxEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	mustDo(t, s.CreateWebhook(ctx, webhook("team_a", "whk_sbx", "sandbox.*")))
	count := func() int {
		return len(mustGet[[]api.Event](t)(s.ListEvents(ctx, store.EventFilter{TeamID: "team_a"})))
	}

	sb := sandbox("team_a", 1, "web", api.StateCreating)
	e, err := s.CreateSandboxEvent(ctx, sb, api.Event{Type: "sandbox.creating", SandboxID: sb.ID, Time: at(1),
		Data: map[string]any{"name": "web"}})
	mustDo(t, err)
	sb.Version = 1
	diff(t, "created sandbox", sb, mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", sb.ID)))
	created := api.Event{ID: e.ID, Type: "sandbox.creating", SandboxID: sb.ID, Time: at(1).UTC(), Data: map[string]any{"name": "web"}}
	diff(t, "returned event", created, e)

	sb.State, sb.StartedAt = api.StateRunning, ptr(at(2))
	e, err = s.UpdateSandboxEvent(ctx, sb, api.Event{Type: "sandbox.running", SandboxID: sb.ID, Time: at(2)})
	mustDo(t, err)
	sb.Version++
	if e.Data == nil {
		t.Error("an event without data came back with nil data")
	}
	diff(t, "updated sandbox", sb, mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", sb.ID)))
	running := api.Event{ID: e.ID, Type: "sandbox.running", SandboxID: sb.ID, Time: at(2).UTC(), Data: map[string]any{}}
	diff(t, "listed events", []api.Event{created, running},
		mustGet[[]api.Event](t)(s.ListEvents(ctx, store.EventFilter{TeamID: "team_a"})))
	var delivered []string
	for _, d := range mustGet[[]api.Delivery](t)(s.ListDeliveries(ctx, store.DeliveryFilter{WebhookID: "whk_sbx"})) {
		delivered = append(delivered, d.EventID)
	}
	slices.Sort(delivered)
	diff(t, "the events' deliveries", []string{created.ID, running.ID}, delivered)

	n := count()
	taken := sandbox("team_a", 2, "web", api.StateCreating)
	_, err = s.CreateSandboxEvent(ctx, taken, api.Event{Type: "sandbox.creating", SandboxID: taken.ID, Time: at(3)})
	wantCode(t, err, api.CodeConflict)
	noTeam := sandbox("team_missing", 3, "", api.StateCreating)
	_, err = s.CreateSandboxEvent(ctx, noTeam, api.Event{Type: "sandbox.creating", SandboxID: noTeam.ID, Time: at(3)})
	wantCode(t, err, api.CodeNotFound)
	stale := sb
	stale.Version--
	stale.State = api.StateAsleep
	_, err = s.UpdateSandboxEvent(ctx, stale, api.Event{Type: "sandbox.asleep", SandboxID: sb.ID, Time: at(4)})
	wantCode(t, err, api.CodeConflict)
	missing := sb
	missing.ID = "sbx_missing"
	_, err = s.UpdateSandboxEvent(ctx, missing, api.Event{Type: "sandbox.asleep", SandboxID: missing.ID, Time: at(4)})
	wantCode(t, err, api.CodeNotFound)
	if got := count(); got != n {
		t.Errorf("%d events after the refused writes, want %d", got, n)
	}
	for _, id := range []string{taken.ID, noTeam.ID} {
		_, err := s.GetSandbox(ctx, "", id)
		wantCode(t, err, api.CodeNotFound)
	}
	diff(t, "sandbox after the refused writes", sb, mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", sb.ID)))
}

func testListCommands(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	s1 := createSandbox(t, s, sandbox("team_a", 1, "", api.StateRunning))
	s2 := createSandbox(t, s, sandbox("team_a", 2, "", api.StateRunning))
	for n, c := range []struct {
		sandbox string
		state   api.CommandState
	}{
		{s1.ID, api.CommandExited},
		{s2.ID, api.CommandRunning},
		{s1.ID, api.CommandRunning},
		{s1.ID, api.CommandKilled},
		{s1.ID, api.CommandRunning},
	} {
		mustDo(t, s.CreateCommand(ctx, command(c.sandbox, n, c.state)))
	}
	gone := command(s1.ID, 99, api.CommandRunning)
	mustDo(t, s.CreateCommand(ctx, gone))
	wantCode(t, s.DeleteCommand(ctx, s2.ID, gone.ID), api.CodeNotFound) // another sandbox's
	mustDo(t, s.DeleteCommand(ctx, s1.ID, gone.ID))
	_, err := s.GetCommand(ctx, s1.ID, gone.ID)
	wantCode(t, err, api.CodeNotFound)

	tests := []struct {
		name   string
		filter store.CommandFilter
		want   []string
	}{
		{"sandbox", store.CommandFilter{SandboxID: s1.ID}, []string{"cmd_0000", "cmd_0002", "cmd_0003", "cmd_0004"}},
		{"all sandboxes", store.CommandFilter{}, []string{"cmd_0000", "cmd_0001", "cmd_0002", "cmd_0003", "cmd_0004"}},
		{"state", store.CommandFilter{SandboxID: s1.ID, States: []api.CommandState{api.CommandRunning}}, []string{"cmd_0002", "cmd_0004"}},
		{"states all sandboxes", store.CommandFilter{States: []api.CommandState{api.CommandRunning}}, []string{"cmd_0001", "cmd_0002", "cmd_0004"}},
		{"first page", store.CommandFilter{SandboxID: s1.ID, Limit: 2}, []string{"cmd_0000", "cmd_0002"}},
		{"second page", store.CommandFilter{SandboxID: s1.ID, After: "cmd_0002", Limit: 2}, []string{"cmd_0003", "cmd_0004"}},
		{"last page", store.CommandFilter{SandboxID: s1.ID, After: "cmd_0004", Limit: 2}, []string{}},
		{"missing sandbox", store.CommandFilter{SandboxID: "sbx_missing"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ListCommands(ctx, tt.filter)
			mustDo(t, err)
			diff(t, "IDs", tt.want, commandIDs(got))
		})
	}
}

func testEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	var ids []string
	for i, e := range []struct{ team, typ, sandbox string }{
		{"team_a", "sandbox.creating", "sbx_1"},
		{"team_b", "sandbox.creating", "sbx_2"},
		{"team_a", "command.started", "sbx_1"},
		{"team_a", "sandbox.creating", "sbx_3"},
		{"team_a", "command.exited", "sbx_1"},
	} {
		got, err := s.AppendEvent(ctx, e.team, api.Event{Type: e.typ, SandboxID: e.sandbox, Time: at(i), Data: map[string]any{"n": float64(i)}})
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) > 0 && got.ID <= ids[len(ids)-1] {
			t.Fatalf("event ID %s does not sort after %s", got.ID, ids[len(ids)-1])
		}
		ids = append(ids, got.ID)
	}
	typesOf := func(evs []api.Event) []string {
		out := []string{}
		for _, e := range evs {
			out = append(out, e.Type+"@"+e.SandboxID)
		}
		return out
	}
	tests := []struct {
		name string
		f    store.EventFilter
		want []string
	}{
		{"team", store.EventFilter{TeamID: "team_a"}, []string{"sandbox.creating@sbx_1", "command.started@sbx_1", "sandbox.creating@sbx_3", "command.exited@sbx_1"}},
		{"other team", store.EventFilter{TeamID: "team_b"}, []string{"sandbox.creating@sbx_2"}},
		{"sandbox", store.EventFilter{TeamID: "team_a", SandboxID: "sbx_1"}, []string{"sandbox.creating@sbx_1", "command.started@sbx_1", "command.exited@sbx_1"}},
		{"types", store.EventFilter{TeamID: "team_a", Types: []string{"command.started", "command.exited"}}, []string{"command.started@sbx_1", "command.exited@sbx_1"}},
		{"after", store.EventFilter{TeamID: "team_a", After: ids[2]}, []string{"sandbox.creating@sbx_3", "command.exited@sbx_1"}},
		{"limit", store.EventFilter{TeamID: "team_a", Limit: 1}, []string{"sandbox.creating@sbx_1"}},
	}
	for _, tt := range tests {
		evs, err := s.ListEvents(ctx, tt.f)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		diff(t, tt.name, tt.want, typesOf(evs))
	}
	evs, _ := s.ListEvents(ctx, store.EventFilter{TeamID: "team_a", Limit: 1})
	want := api.Event{ID: ids[0], Type: "sandbox.creating", SandboxID: "sbx_1", Time: at(0).UTC(), Data: map[string]any{"n": float64(0)}}
	diff(t, "round trip", []api.Event{want}, evs)
	_, err := s.ListEvents(ctx, store.EventFilter{TeamID: "team_a", After: "garbage"})
	wantCode(t, err, api.CodeInvalidArgument)
	_, err = s.AppendEvent(ctx, "team_missing", api.Event{Type: "x", Time: at(0)})
	wantCode(t, err, api.CodeNotFound)
}

func testEventExpiry(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	var ids []string
	for i, team := range []string{"team_a", "team_b", "team_a", "team_b"} {
		e, err := s.AppendEvent(ctx, team, api.Event{Type: "sandbox.running", Time: at(i)})
		mustDo(t, err)
		ids = append(ids, e.ID)
	}
	n, err := s.DeleteEventsBefore(ctx, at(2))
	mustDo(t, err)
	if n != 2 {
		t.Fatalf("dropped %d events, want the 2 before the cut", n)
	}
	for team, want := range map[string][]string{"team_a": {ids[2]}, "team_b": {ids[3]}} {
		evs, err := s.ListEvents(ctx, store.EventFilter{TeamID: team})
		mustDo(t, err)
		var got []string
		for _, e := range evs {
			got = append(got, e.ID)
		}
		diff(t, team+" after expiry", want, got)
	}
	// A cursor at a dropped event still pages on.
	evs, err := s.ListEvents(ctx, store.EventFilter{TeamID: "team_a", After: ids[0]})
	mustDo(t, err)
	if len(evs) != 1 || evs[0].ID != ids[2] {
		t.Fatalf("after a dropped event: %+v", evs)
	}
	// New events sort after the kept ones.
	e, err := s.AppendEvent(ctx, "team_a", api.Event{Type: "sandbox.idle", Time: at(9)})
	mustDo(t, err)
	if e.ID <= ids[3] {
		t.Fatalf("new event %s sorts before %s", e.ID, ids[3])
	}
}
