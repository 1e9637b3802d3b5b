package storetest

import (
	"context"
	"sync"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// versioned is one kind of versioned row, seen through the same few
// calls: a case of testVersions.
type versioned struct {
	name string
	// create stores a new row whose given version is not 1.
	create func(ctx context.Context) error
	// version reads the stored row's version.
	version func(ctx context.Context) (int64, error)
	// listed reads the version the row has in a list.
	listed func(ctx context.Context) (int64, error)
	// update writes the row, changed (by n), at version v.
	update func(ctx context.Context, v int64, n int) error
	// changed reads which change (n) the stored row holds.
	changed func(ctx context.Context) (int, error)
	// missing updates a row that does not exist, at version v.
	missing func(ctx context.Context, v int64) error
}

// testVersions: sandboxes, commands and workloads are written by
// compare-and-swap on their version: a create stores 1, an update at the
// stored version stores the next one, and an update at any other version
// answers CodeConflict and changes nothing, so that of writers that read
// the same version exactly one wins.
func testVersions(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	host := createSandbox(t, s, sandbox("team_a", 90, "", api.StateRunning))

	sb := sandbox("team_a", 1, "", api.StateRunning)
	cmd := command(host.ID, 1, api.CommandRunning)
	wl := api.Workload{ID: "wl_0001", TeamID: "team_a", Template: "managed", Command: "true",
		Workdir: "/workspace", User: "user", State: api.WorkloadQueued, CreatedAt: at(1)}
	kinds := []versioned{
		{
			name: "sandbox",
			create: func(ctx context.Context) error {
				c := sb
				c.Version = 7
				return s.CreateSandbox(ctx, c)
			},
			version: func(ctx context.Context) (int64, error) {
				got, err := s.GetSandbox(ctx, "team_a", sb.ID)
				return got.Version, err
			},
			listed: func(ctx context.Context) (int64, error) {
				all, err := s.ListSandboxes(ctx, store.SandboxFilter{TeamID: "team_a", Limit: 1})
				if err != nil || len(all) != 1 || all[0].ID != sb.ID {
					return 0, err
				}
				return all[0].Version, nil
			},
			update: func(ctx context.Context, v int64, n int) error {
				c := sb
				c.Version, c.IdleTimeoutS = v, int64(n)
				return s.UpdateSandbox(ctx, c)
			},
			changed: func(ctx context.Context) (int, error) {
				got, err := s.GetSandbox(ctx, "team_a", sb.ID)
				return int(got.IdleTimeoutS), err
			},
			missing: func(ctx context.Context, v int64) error {
				c := sb
				c.ID, c.Version = "sbx_missing", v
				return s.UpdateSandbox(ctx, c)
			},
		},
		{
			name: "command",
			create: func(ctx context.Context) error {
				c := cmd
				c.Version = 7
				return s.CreateCommand(ctx, c)
			},
			version: func(ctx context.Context) (int64, error) {
				got, err := s.GetCommand(ctx, host.ID, cmd.ID)
				return got.Version, err
			},
			listed: func(ctx context.Context) (int64, error) {
				all, err := s.ListCommands(ctx, store.CommandFilter{SandboxID: host.ID})
				if err != nil || len(all) != 1 {
					return 0, err
				}
				return all[0].Version, nil
			},
			update: func(ctx context.Context, v int64, n int) error {
				c := cmd
				c.Version, c.StdoutBytes = v, int64(n)
				return s.UpdateCommand(ctx, c)
			},
			changed: func(ctx context.Context) (int, error) {
				got, err := s.GetCommand(ctx, host.ID, cmd.ID)
				return int(got.StdoutBytes), err
			},
			missing: func(ctx context.Context, v int64) error {
				c := cmd
				c.ID, c.Version = "cmd_missing", v
				return s.UpdateCommand(ctx, c)
			},
		},
		{
			name: "workload",
			create: func(ctx context.Context) error {
				c := wl
				c.Version = 7
				return s.CreateWorkload(ctx, c)
			},
			version: func(ctx context.Context) (int64, error) {
				got, err := s.GetWorkload(ctx, "team_a", wl.ID)
				return got.Version, err
			},
			listed: func(ctx context.Context) (int64, error) {
				all, err := s.ListWorkloads(ctx, store.WorkloadFilter{TeamID: "team_a"})
				if err != nil || len(all) != 1 {
					return 0, err
				}
				return all[0].Version, nil
			},
			update: func(ctx context.Context, v int64, n int) error {
				c := wl
				c.Version, c.StdoutBytes = v, int64(n)
				return s.UpdateWorkload(ctx, c)
			},
			changed: func(ctx context.Context) (int, error) {
				got, err := s.GetWorkload(ctx, "team_a", wl.ID)
				return int(got.StdoutBytes), err
			},
			missing: func(ctx context.Context, v int64) error {
				c := wl
				c.ID, c.Version = "wl_missing", v
				return s.UpdateWorkload(ctx, c)
			},
		},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			mustDo(t, k.create(ctx))
			wantVersion := func(what string, want int64) {
				t.Helper()
				if got := mustGet[int64](t)(k.version(ctx)); got != want {
					t.Errorf("%s: version = %d; want %d", what, got, want)
				}
				if got := mustGet[int64](t)(k.listed(ctx)); got != want {
					t.Errorf("%s: listed version = %d; want %d", what, got, want)
				}
			}
			wantVersion("created with version 7", 1)

			mustDo(t, k.update(ctx, 1, 10))
			wantVersion("updated at 1", 2)
			wantCode(t, k.update(ctx, 1, 11), api.CodeConflict)
			wantCode(t, k.update(ctx, 3, 12), api.CodeConflict)
			wantCode(t, k.update(ctx, 0, 13), api.CodeConflict)
			wantVersion("after refused updates", 2)
			if got := mustGet[int](t)(k.changed(ctx)); got != 10 {
				t.Errorf("stored change = %d; want 10, the one accepted", got)
			}
			wantCode(t, k.missing(ctx, 2), api.CodeNotFound)

			// Writers that read the same version race: one wins, every
			// other is told to retry, and the row holds the winner's change.
			const writers = 8
			var wg sync.WaitGroup
			errs := make([]error, writers)
			for i := range writers {
				wg.Go(func() { errs[i] = k.update(ctx, 2, 100+i) })
			}
			wg.Wait()
			winner := -1
			for i, err := range errs {
				switch api.ErrorCode(err) {
				case "":
					if winner >= 0 {
						t.Errorf("writers %d and %d both won at version 2", winner, i)
					}
					winner = i
				case api.CodeConflict:
				default:
					t.Errorf("writer %d: %v; want success or conflict", i, err)
				}
			}
			if winner < 0 {
				t.Fatal("no writer won at version 2")
			}
			wantVersion("after the race", 3)
			if got := mustGet[int](t)(k.changed(ctx)); got != 100+winner {
				t.Errorf("stored change = %d; want %d, the winner's", got, 100+winner)
			}
		})
	}

	t.Run("columns apart", func(t *testing.T) {
		// The meter's columns are not an update's: writing them leaves
		// the version, so they never make a transition retry.
		before := mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", host.ID))
		mustDo(t, s.SetStoredBytes(ctx, host.ID, 4096))
		if got := mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", host.ID)); got.Version != before.Version {
			t.Errorf("version after SetStoredBytes = %d; want %d", got.Version, before.Version)
		}
	})

	t.Run("preview", func(t *testing.T) {
		p := store.Preview{ID: "prv_1", TeamID: "team_a", SandboxID: host.ID, Port: 8000,
			Visibility: "public", CreatedAt: at(1), Version: 5}
		mustDo(t, s.CreatePreview(ctx, p))
		if got := mustGet[store.Preview](t)(s.GetPreview(ctx, "team_a", p.ID)); got.Version != 1 {
			t.Errorf("preview version = %d; want 1", got.Version)
		}
		if got := mustGet[[]store.Preview](t)(s.ListPreviews(ctx, host.ID)); len(got) != 1 || got[0].Version != 1 {
			t.Errorf("listed previews = %+v; want one at version 1", got)
		}
	})
}

// testIdempotencyRef: a sandbox created with an IdempotencyRef (an
// idempotent create that took a pooled sandbox) is found by that ref in
// its team only; updates keep the ref; sandboxes without one are never
// matched.
func testIdempotencyRef(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	plain := createSandbox(t, s, sandbox("team_a", 1, "", api.StateRunning))
	pooled := sandbox("team_a", 2, "", api.StateCreating)
	pooled.IdempotencyRef = "sbx_derived"
	mustDo(t, s.CreateSandbox(ctx, pooled))
	find := func(team, ref string) []string {
		t.Helper()
		got, err := s.ListSandboxes(ctx, store.SandboxFilter{TeamID: team, IdempotencyRef: ref})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sb := range got {
			ids = append(ids, sb.ID)
		}
		return ids
	}
	if got := find("team_a", "sbx_derived"); len(got) != 1 || got[0] != pooled.ID {
		t.Errorf("by ref: %v; want [%s]", got, pooled.ID)
	}
	if got := find("team_b", "sbx_derived"); len(got) != 0 {
		t.Errorf("another team found %v by the ref", got)
	}
	if got := find("team_a", plain.ID); len(got) != 0 {
		t.Errorf("a sandbox's own ID matched as a ref: %v", got)
	}
	cur, err := s.GetSandbox(ctx, "team_a", pooled.ID)
	if err != nil {
		t.Fatal(err)
	}
	cur.State = api.StateRunning
	mustDo(t, s.UpdateSandbox(ctx, cur))
	if got := find("team_a", "sbx_derived"); len(got) != 1 || got[0] != pooled.ID {
		t.Errorf("after an update, by ref: %v; want [%s]", got, pooled.ID)
	}
}

// testSetID: a sandbox's SetID is stored at create and read back by get
// and list; an update never changes it, whatever the sandbox it is given
// says, so that nothing but a create can turn it on.
func testSetID(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	plain := createSandbox(t, s, sandbox("team_a", 1, "", api.StateRunning))
	e2b := sandbox("team_a", 2, "", api.StateCreating)
	e2b.SetID = true
	mustDo(t, s.CreateSandbox(ctx, e2b))
	check := func(when string, want map[string]bool) {
		t.Helper()
		for id, w := range want {
			got, err := s.GetSandbox(ctx, "team_a", id)
			if err != nil {
				t.Fatal(err)
			}
			if got.SetID != w {
				t.Errorf("%s: get %s: SetID = %v, want %v", when, id, got.SetID, w)
			}
		}
		listed, err := s.ListSandboxes(ctx, store.SandboxFilter{TeamID: "team_a"})
		if err != nil {
			t.Fatal(err)
		}
		if len(listed) != len(want) {
			t.Fatalf("%s: listed %d sandboxes, want %d", when, len(listed), len(want))
		}
		for _, sb := range listed {
			if sb.SetID != want[sb.ID] {
				t.Errorf("%s: list %s: SetID = %v, want %v", when, sb.ID, sb.SetID, want[sb.ID])
			}
		}
	}
	check("created", map[string]bool{plain.ID: false, e2b.ID: true})
	for id, flip := range map[string]bool{plain.ID: true, e2b.ID: false} {
		cur, err := s.GetSandbox(ctx, "team_a", id)
		if err != nil {
			t.Fatal(err)
		}
		cur.SetID = flip
		cur.Labels = map[string]string{"touched": "yes"}
		mustDo(t, s.UpdateSandbox(ctx, cur))
	}
	check("updated", map[string]bool{plain.ID: false, e2b.ID: true})
}
