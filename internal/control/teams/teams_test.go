package teams_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/teams"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// clock is a settable clock for the service.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// newService returns the service over a new SQLite store, with new teams
// admitted to managed_environment only, and its clock.
func newService(t *testing.T) (*teams.Service, *sqlite.DB, *clock) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	cfg := teams.Config{DefaultAdmission: api.Admission{ManagedEnvironment: true}}
	return teams.New(cfg, st, slog.New(slog.DiscardHandler), c.now), st, c
}

// team stores a team as it is named, with admission a.
func team(t *testing.T, st *sqlite.DB, name string, a api.Admission) api.Team {
	t.Helper()
	tm := api.Team{ID: "team_" + name, Name: name, Admission: a, CreatedAt: time.Now().UTC()}
	if err := st.CreateTeam(t.Context(), tm); err != nil {
		t.Fatal(err)
	}
	return tm
}

// TestRequireAdmission: a call needing a flag passes for a team that holds
// it and for the admin team whatever is stored, and is refused with
// permission_denied naming the flag and the command that grants it to any
// other team.
func TestRequireAdmission(t *testing.T) {
	s, st, _ := newService(t)
	none := team(t, st, "none", api.Admission{})
	gpu := team(t, st, "gpu", api.Admission{GPU: true})
	all := team(t, st, "all", teams.All)
	admin := team(t, st, teams.AdminTeam, api.Admission{}) // stored with none
	for _, tt := range []struct {
		team api.Team
		flag string
		want api.Code // "" passes
	}{
		{none, teams.AdmitManaged, api.CodePermissionDenied},
		{none, teams.AdmitPreview, api.CodePermissionDenied},
		{none, teams.AdmitImages, api.CodePermissionDenied},
		{none, teams.AdmitGPU, api.CodePermissionDenied},
		{gpu, teams.AdmitGPU, ""},
		{gpu, teams.AdmitPreview, api.CodePermissionDenied},
		{all, teams.AdmitManaged, ""},
		{all, teams.AdmitPreview, ""},
		{all, teams.AdmitImages, ""},
		{all, teams.AdmitGPU, ""},
		{admin, teams.AdmitManaged, ""},
		{admin, teams.AdmitPreview, ""},
		{admin, teams.AdmitImages, ""},
		{admin, teams.AdmitGPU, ""},
		{all, "no_such_flag", api.CodePermissionDenied},
	} {
		t.Run(tt.team.Name+"/"+tt.flag, func(t *testing.T) {
			err := s.RequireAdmission(t.Context(), tt.team.ID, tt.flag)
			if api.ErrorCode(err) != tt.want {
				t.Fatalf("RequireAdmission = %v; want code %q", err, tt.want)
			}
			if err == nil {
				return
			}
			var e *api.Error
			if !errAs(err, &e) || e.Details["admission"] != tt.flag || e.Details["team"] != tt.team.Name ||
				!strings.Contains(e.Message, "cove teams admit "+tt.team.Name+" --"+strings.ReplaceAll(tt.flag, "_", "-")) {
				t.Errorf("refusal %+v: want the flag, the team and the command that grants it", e)
			}
		})
	}
	if err := s.RequireAdmission(t.Context(), "team_gone", teams.AdmitManaged); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("an unknown team: %v; want not_found", err)
	}
}

func errAs(err error, e **api.Error) bool {
	x, ok := err.(*api.Error)
	*e = x
	return ok
}

// TestTeamMe: a team sees the admission it may use (the admin team every
// flag, whatever is stored) and its flags by name, in the API's order.
func TestTeamMe(t *testing.T) {
	s, st, _ := newService(t)
	for _, tt := range []struct {
		name   string
		stored api.Admission
		want   []string
	}{
		{"plain", api.Admission{}, nil},
		{"previews", api.Admission{Preview: true, GPU: true}, []string{teams.AdmitPreview, teams.AdmitGPU}},
		{teams.AdminTeam, api.Admission{}, teams.AdmissionFlags},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tm := team(t, st, tt.name, tt.stored)
			me, err := s.TeamMe(t.Context(), teams.Principal{Team: tm})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(me.Admitted, tt.want) || me.Admin != (tt.name == teams.AdminTeam) {
				t.Errorf("TeamMe = admitted %v, admin %v; want %v", me.Admitted, me.Admin, tt.want)
			}
			for _, f := range teams.AdmissionFlags {
				if teams.Has(me.Team.Admission, f) != slices.Contains(tt.want, f) {
					t.Errorf("the team's admission %+v disagrees with admitted %v on %s", me.Team.Admission, tt.want, f)
				}
			}
		})
	}
}

// TestAdminKeepsEveryFlag: no update takes a flag from the admin team;
// other teams' flags change freely.
func TestAdminKeepsEveryFlag(t *testing.T) {
	for _, tt := range []struct {
		team string
		to   *api.Admission
		ok   bool
	}{
		{teams.AdminTeam, nil, true},
		{teams.AdminTeam, &teams.All, true},
		{teams.AdminTeam, &api.Admission{ManagedEnvironment: true, Preview: true, CustomImages: true}, false},
		{teams.AdminTeam, &api.Admission{}, false},
		{"other", &api.Admission{}, true},
		{"other", &teams.All, true},
	} {
		err := teams.CheckAdmissionChange(api.Team{Name: tt.team}, tt.to)
		if (err == nil) != tt.ok || (err != nil && api.ErrorCode(err) != api.CodeInvalidArgument) {
			t.Errorf("%s to %+v: %v; want ok %v", tt.team, tt.to, err, tt.ok)
		}
	}
}

// TestNewTeamsAdmission: a new team gets the configured default admission;
// the admin team made at first start gets every flag.
func TestNewTeamsAdmission(t *testing.T) {
	s, st, _ := newService(t)
	key, err := s.Bootstrap(t.Context())
	if err != nil || key == "" {
		t.Fatalf("Bootstrap = %q, %v", key, err)
	}
	admin, err := s.Authenticate(t.Context(), key)
	if err != nil || !admin.Admin() {
		t.Fatalf("the first key is %+v, %v; want the admin team's", admin, err)
	}
	if again, err := s.Bootstrap(t.Context()); err != nil || again != "" {
		t.Errorf("a second Bootstrap made a key: %q %v", again, err)
	}
	resp, err := s.CreateTeam(t.Context(), admin, api.CreateTeamRequest{Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]api.Admission{teams.AdminTeam: teams.All, "dev": {ManagedEnvironment: true}} {
		tm, err := st.GetTeamByName(t.Context(), name)
		if err != nil || tm.Admission != want {
			t.Errorf("team %s stored with %+v, %v; want %+v", name, tm.Admission, err, want)
		}
	}
	dev, err := s.Authenticate(t.Context(), resp.APIKey)
	if err != nil || dev.Team.ID != resp.Team.ID {
		t.Fatalf("the new team's key: %+v %v", dev, err)
	}
	if _, err := s.CreateTeam(t.Context(), dev, api.CreateTeamRequest{Name: "mine"}); api.ErrorCode(err) != api.CodePermissionDenied {
		t.Errorf("a team other than admin made a team: %v", err)
	}
	if err := s.RevokeKey(t.Context(), dev, resp.KeyID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(t.Context(), resp.APIKey); api.ErrorCode(err) != api.CodeUnauthenticated {
		t.Errorf("a revoked key authenticates: %v", err)
	}
}

// TestIdempotently: under one key, the first successful answer is kept
// and replayed for the same request; another request under the key is
// refused; a failed answer is not kept, so the request may be retried.
func TestIdempotently(t *testing.T) {
	s, st, _ := newService(t)
	a := team(t, st, "a", api.Admission{})
	b := team(t, st, "b", api.Admission{})
	runs := 0
	answer := func(status int, body string) func(context.Context) teams.Answer {
		return func(context.Context) teams.Answer { runs++; return teams.Answer{Status: status, Body: []byte(body)} }
	}
	for _, tt := range []struct {
		name         string
		team, key    string
		hash         string
		do           func(context.Context) teams.Answer
		wantBody     string
		wantReplayed bool
		wantCode     api.Code
		wantRuns     int
	}{
		{"first run", a.ID, "k1", "h1", answer(http.StatusCreated, "one"), "one", false, "", 1},
		{"replayed", a.ID, "k1", "h1", answer(http.StatusCreated, "two"), "one", true, "", 1},
		{"another request under the key", a.ID, "k1", "h2", answer(http.StatusCreated, "three"), "", false, api.CodeUnprocessable, 1},
		{"another team's key is its own", b.ID, "k1", "h2", answer(http.StatusCreated, "b"), "b", false, "", 2},
		{"a failure runs", a.ID, "k2", "h1", answer(http.StatusConflict, "no"), "no", false, "", 3},
		{"and is not kept", a.ID, "k2", "h1", answer(http.StatusCreated, "yes"), "yes", false, "", 4},
		{"the success is", a.ID, "k2", "h1", answer(http.StatusCreated, "again"), "yes", true, "", 4},
	} {
		got, replayed, err := s.Idempotently(t.Context(), tt.team, tt.key, tt.hash, tt.do)
		if api.ErrorCode(err) != tt.wantCode || string(got.Body) != tt.wantBody || replayed != tt.wantReplayed || runs != tt.wantRuns {
			t.Errorf("%s: %q replayed %v err %v after %d runs; want %q replayed %v code %q after %d",
				tt.name, got.Body, replayed, err, runs, tt.wantBody, tt.wantReplayed, tt.wantCode, tt.wantRuns)
		}
	}
}

// TestIdempotentAnswersExpire: an answer is replayed for IdempotencyTTL;
// after it the key runs the request again.
func TestIdempotentAnswersExpire(t *testing.T) {
	s, st, c := newService(t)
	a := team(t, st, "a", api.Admission{})
	ok := func(body string) func(context.Context) teams.Answer {
		return func(context.Context) teams.Answer {
			return teams.Answer{Status: http.StatusCreated, Body: []byte(body)}
		}
	}
	if _, _, err := s.Idempotently(t.Context(), a.ID, "k", "h", ok("first")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		after time.Duration
		want  string
	}{
		{teams.IdempotencyTTL - time.Second, "first"},
		{teams.IdempotencyTTL + time.Second, "second"},
	} {
		c.t = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(tt.after)
		s.ExpireIdempotent(context.Background())
		got, _, err := s.Idempotently(t.Context(), a.ID, "k", "h", ok("second"))
		if err != nil || string(got.Body) != tt.want {
			t.Errorf("%v after: %q %v; want %q", tt.after, got.Body, err, tt.want)
		}
	}
}

// TestParseAdmission: flags by name, comma-separated; none or empty is
// none; an unknown name is refused.
func TestParseAdmission(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want api.Admission
		ok   bool
	}{
		{"", api.Admission{}, true},
		{"none", api.Admission{}, true},
		{"managed_environment", api.Admission{ManagedEnvironment: true}, true},
		{"preview, gpu", api.Admission{Preview: true, GPU: true}, true},
		{"managed_environment,preview,custom_images,gpu", teams.All, true},
		{"root", api.Admission{}, false},
	} {
		got, err := teams.ParseAdmission(tt.in)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("ParseAdmission(%q) = %+v, %v; want %+v ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// TestIdempotentlyAcrossReplicas: two services over one store, as two
// replicas. While one runs a key's request, the other (and itself) refuse
// the key with conflict and a Retry-After; once the runner is dead, the
// other takes the key over and derives the same IDs.
func TestIdempotentlyAcrossReplicas(t *testing.T) {
	a, st, c := newService(t)
	tm := team(t, st, "a", api.Admission{})
	dead := false
	b := teams.New(teams.Config{Replica: "rep_b", ReplicaAlive: func(context.Context, string) (bool, error) { return !dead, nil }},
		st, slog.New(slog.DiscardHandler), c.now)
	inFlight := func(s *teams.Service) {
		t.Helper()
		_, _, err := s.Idempotently(t.Context(), tm.ID, "k", "h", func(context.Context) teams.Answer {
			t.Error("a key in flight ran again")
			return teams.Answer{Status: http.StatusCreated}
		})
		var e *api.Error
		if !errors.As(err, &e) || e.Code != api.CodeConflict || e.Details["retry_after_s"] != teams.InFlightRetryS {
			t.Errorf("a key in flight: %v; want conflict with retry_after_s", err)
		}
	}
	var firstID, secondID string
	_, _, err := a.Idempotently(t.Context(), tm.ID, "k", "h", func(ctx context.Context) teams.Answer {
		firstID = id.For(ctx, "sbx")
		if !id.Derived(ctx) || id.Resumed(ctx) {
			t.Error("a first attempt's IDs are not derived, or taken for resumed")
		}
		inFlight(b)
		inFlight(a)
		// a dies here: its answer comes after b took the key over.
		dead = true
		got, replayed, err := b.Idempotently(t.Context(), tm.ID, "k", "h", func(ctx context.Context) teams.Answer {
			secondID = id.For(ctx, "sbx")
			if !id.Resumed(ctx) {
				t.Error("the take-over is not marked resumed: its creates would not look for the first attempt's")
			}
			return teams.Answer{Status: http.StatusCreated, Body: []byte("b")}
		})
		if err != nil || replayed || string(got.Body) != "b" {
			t.Errorf("take-over: %q replayed %v err %v", got.Body, replayed, err)
		}
		return teams.Answer{Status: http.StatusCreated, Body: []byte("a")}
	})
	if err != nil {
		t.Fatal(err)
	}
	if firstID == "" || firstID != secondID {
		t.Errorf("the take-over derived %q; want the first attempt's %q", secondID, firstID)
	}
	got, replayed, err := a.Idempotently(t.Context(), tm.ID, "k", "h", func(context.Context) teams.Answer {
		t.Error("an answered key ran again")
		return teams.Answer{}
	})
	if err != nil || !replayed || string(got.Body) != "b" {
		t.Errorf("after: %q replayed %v err %v; want b's answer replayed", got.Body, replayed, err)
	}
}

// TestIdempotentlyAfterRestart: a claim left pending by an earlier run of
// this replica (same ID, process gone) is taken over at the next retry
// instead of holding the key until it expires.
func TestIdempotentlyAfterRestart(t *testing.T) {
	_, st, c := newService(t)
	tm := team(t, st, "a", api.Admission{})
	_, claimed, err := st.ClaimIdempotent(t.Context(), store.IdempotencyClaim{
		TeamID: tm.ID, Key: "k", RequestHash: "h", Owner: "rep_x", Seed: []byte("s"), ClaimedAt: c.now(),
	})
	if err != nil || !claimed {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	s := teams.New(teams.Config{Replica: "rep_x"}, st, slog.New(slog.DiscardHandler), c.now)
	runs := 0
	got, replayed, err := s.Idempotently(t.Context(), tm.ID, "k", "h", func(ctx context.Context) teams.Answer {
		runs++
		if !id.Resumed(ctx) {
			t.Error("the retry after a restart is not marked resumed")
		}
		return teams.Answer{Status: http.StatusCreated, Body: []byte("done")}
	})
	if err != nil || replayed || runs != 1 || string(got.Body) != "done" {
		t.Fatalf("retry after a restart: %q replayed %v runs %d err %v", got.Body, replayed, runs, err)
	}
}

// TestKeyFormats: a key of either shape is its team's key, found by its
// hash; the shape alone opens nothing, and another team's key cannot be
// made by a team.
func TestKeyFormats(t *testing.T) {
	s, _, _ := newService(t)
	key, err := s.Bootstrap(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := s.Authenticate(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := s.CreateTeam(t.Context(), admin, api.CreateTeamRequest{Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	devP, err := s.Authenticate(t.Context(), dev.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		format, prefix string
	}{{"", "cove_"}, {api.KeyFormatCove, "cove_"}, {api.KeyFormatE2B, "e2b_"}} {
		resp, err := s.CreateKey(t.Context(), devP, dev.Team.ID, api.CreateKeyRequest{Format: tc.format})
		if err != nil {
			t.Fatalf("format %q: %v", tc.format, err)
		}
		hex := strings.TrimPrefix(resp.APIKey, tc.prefix)
		if hex == resp.APIKey || len(hex) != 48 || strings.Trim(hex, "0123456789abcdef") != "" {
			t.Errorf("format %q made %q; want %s and 48 hex digits", tc.format, resp.APIKey, tc.prefix)
		}
		p, err := s.Authenticate(t.Context(), resp.APIKey)
		if err != nil || p.Team.ID != dev.Team.ID {
			t.Errorf("format %q: the key authenticates as %+v, %v; want team dev", tc.format, p.Team, err)
		}
	}
	if _, err := s.CreateKey(t.Context(), devP, dev.Team.ID, api.CreateKeyRequest{Format: "aws"}); api.ErrorCode(err) != api.CodeInvalidArgument {
		t.Errorf("an unknown format: %v; want invalid_argument", err)
	}
	if _, err := s.CreateKey(t.Context(), devP, admin.Team.ID, api.CreateKeyRequest{Format: api.KeyFormatE2B}); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("a team made a key of another team: %v; want not_found", err)
	}
	for _, forged := range []string{"e2b_" + strings.Repeat("0", 48), "cove_" + strings.Repeat("a", 48), "", strings.Repeat("e", 200)} {
		if _, err := s.Authenticate(t.Context(), forged); api.ErrorCode(err) != api.CodeUnauthenticated {
			t.Errorf("the key %q authenticates: %v", forged, err)
		}
	}
}

// countingStore counts the store's reads of keys and teams.
type countingStore struct {
	*sqlite.DB
	keys, teams int
}

func (c *countingStore) KeyByHash(ctx context.Context, hash string) (store.Key, api.Team, error) {
	c.keys++
	return c.DB.KeyByHash(ctx, hash)
}

func (c *countingStore) GetTeam(ctx context.Context, id string) (api.Team, error) {
	c.teams++
	return c.DB.GetTeam(ctx, id)
}

// TestAuthenticateReadsOnce: a key's team comes with the key, in one read
// of the store, as the team is stored; a revoked key is refused.
func TestAuthenticateReadsOnce(t *testing.T) {
	_, st, c := newService(t)
	cs := &countingStore{DB: st}
	s := teams.New(teams.Config{DefaultAdmission: api.Admission{ManagedEnvironment: true}}, cs, slog.New(slog.DiscardHandler), c.now)
	admin, err := s.Authenticate(t.Context(), mustBootstrap(t, s))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := s.CreateTeam(t.Context(), admin, api.CreateTeamRequest{Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	limit := 3.5
	if _, err := s.UpdateTeam(t.Context(), admin, dev.Team.ID, api.UpdateTeamRequest{SpendLimitUSD: &limit}); err != nil {
		t.Fatal(err)
	}
	stored, err := st.GetTeam(t.Context(), dev.Team.ID)
	if err != nil {
		t.Fatal(err)
	}
	cs.keys, cs.teams = 0, 0
	p, err := s.Authenticate(t.Context(), dev.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	if cs.keys != 1 || cs.teams != 0 {
		t.Errorf("Authenticate read %d keys and %d teams; want one key with its team", cs.keys, cs.teams)
	}
	if d := cmp.Diff(stored, p.Team); d != "" {
		t.Errorf("the key's team (-stored +authenticated):\n%s", d)
	}
	if err := s.RevokeKey(t.Context(), admin, dev.KeyID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(t.Context(), dev.APIKey); api.ErrorCode(err) != api.CodeUnauthenticated {
		t.Errorf("a revoked key: %v; want unauthenticated", err)
	}
}

func mustBootstrap(t *testing.T, s *teams.Service) string {
	t.Helper()
	key, err := s.Bootstrap(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// keepingStore holds CompleteIdempotent, the keeping of an answer, until
// release is closed; entered gets a value when one is under way.
type keepingStore struct {
	*sqlite.DB
	entered chan struct{}
	release chan struct{}
}

func (k *keepingStore) CompleteIdempotent(ctx context.Context, teamID, key, owner string, status int, body []byte) error {
	k.entered <- struct{}{}
	<-k.release
	return k.DB.CompleteIdempotent(ctx, teamID, key, owner, status, body)
}

// TestIdempotentlyAnswersWhileKeeping: with a Keeper, a successful answer
// is given while it is being stored. Meanwhile a retry on the same
// replica is replayed from memory (and another request under the key
// refused), one on another replica is in flight; once stored, every
// replica replays it from the store.
func TestIdempotentlyAnswersWhileKeeping(t *testing.T) {
	_, st, c := newService(t)
	tm := team(t, st, "a", api.Admission{})
	ks := &keepingStore{DB: st, entered: make(chan struct{}, 1), release: make(chan struct{})}
	var keeper sync.WaitGroup
	log := slog.New(slog.DiscardHandler)
	a := teams.New(teams.Config{Replica: "rep_a", Keeper: &keeper}, ks, log, c.now)
	b := teams.New(teams.Config{Replica: "rep_b", ReplicaAlive: func(context.Context, string) (bool, error) { return true, nil }}, st, log, c.now)
	runs := 0
	run := func(body string) func(context.Context) teams.Answer {
		return func(context.Context) teams.Answer {
			runs++
			return teams.Answer{Status: http.StatusCreated, Body: []byte(body)}
		}
	}
	type result struct {
		body     string
		replayed bool
		err      error
	}
	first := make(chan result, 1)
	go func() {
		got, replayed, err := a.Idempotently(t.Context(), tm.ID, "k", "h", run("one"))
		first <- result{string(got.Body), replayed, err}
	}()
	select {
	case r := <-first:
		if r.body != "one" || r.replayed || r.err != nil {
			t.Errorf("first: %+v; want one, not replayed", r)
		}
	case <-time.After(30 * time.Second):
		close(ks.release)
		t.Fatal("the answer was not given before it was stored")
	}
	<-ks.entered // its keeping is under way, and held
	if got, replayed, err := a.Idempotently(t.Context(), tm.ID, "k", "h", run("two")); string(got.Body) != "one" || !replayed || err != nil {
		t.Errorf("a retry on the replica that answered: %q replayed %v %v; want one, replayed", got.Body, replayed, err)
	}
	if _, _, err := a.Idempotently(t.Context(), tm.ID, "k", "other", run("three")); api.ErrorCode(err) != api.CodeUnprocessable {
		t.Errorf("another request under the key while it is kept: %v; want unprocessable", err)
	}
	var e *api.Error
	if _, _, err := b.Idempotently(t.Context(), tm.ID, "k", "h", run("four")); !errors.As(err, &e) || e.Code != api.CodeConflict || e.Details["retry_after_s"] != teams.InFlightRetryS {
		t.Errorf("a retry on another replica while it is kept: %v; want conflict with retry_after_s", err)
	}
	close(ks.release)
	keeper.Wait()
	for name, s := range map[string]*teams.Service{"the replica that answered": a, "another": b} {
		if got, replayed, err := s.Idempotently(t.Context(), tm.ID, "k", "h", run("five")); string(got.Body) != "one" || !replayed || err != nil {
			t.Errorf("%s, once kept: %q replayed %v %v; want one, replayed", name, got.Body, replayed, err)
		}
	}
	if runs != 1 {
		t.Errorf("the request ran %d times; want once", runs)
	}
}

// blinkingStore is a store whose writes ending a key's claim find the
// database away (a connection refused) the first times they are tried,
// or fail for good with fail.
type blinkingStore struct {
	*sqlite.DB
	away                   int // the first writes of each kind that fail
	fail                   error
	completes, rel, gaveUp atomic.Int32
}

func (b *blinkingStore) err(n int32) error {
	if b.fail != nil {
		return b.fail
	}
	if int(n) <= b.away {
		return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return nil
}

func (b *blinkingStore) CompleteIdempotent(ctx context.Context, teamID, key, owner string, status int, body []byte) error {
	if err := b.err(b.completes.Add(1)); err != nil {
		return err
	}
	return b.DB.CompleteIdempotent(ctx, teamID, key, owner, status, body)
}

func (b *blinkingStore) ReleaseIdempotent(ctx context.Context, teamID, key, owner string) error {
	if err := b.err(b.rel.Add(1)); err != nil {
		return err
	}
	return b.DB.ReleaseIdempotent(ctx, teamID, key, owner)
}

func (b *blinkingStore) TakeOverIdempotent(ctx context.Context, teamID, key, deadOwner, newOwner string) (store.Idempotent, error) {
	if err := b.err(b.gaveUp.Add(1)); err != nil {
		return store.Idempotent{}, err
	}
	return b.DB.TakeOverIdempotent(ctx, teamID, key, deadOwner, newOwner)
}

// TestIdempotentEndsOutlastTheStoreAway: the writes that keep a key's
// answer, release a refused request's key and give up a failed one's are
// tried again while the store is unavailable (a database restarting), so
// the key does not stay in flight for the other replicas; a write that
// fails otherwise is tried once. A request that failed with a server
// error, maybe after part of its work, is resumed by its retry on another
// replica with the same IDs, not run anew.
func TestIdempotentEndsOutlastTheStoreAway(t *testing.T) {
	_, st, c := newService(t)
	tm := team(t, st, "a", api.Admission{})
	log := slog.New(slog.DiscardHandler)
	bs := &blinkingStore{DB: st, away: 3}
	var keeper sync.WaitGroup
	a := teams.New(teams.Config{Replica: "rep_a", Keeper: &keeper}, bs, log, c.now)
	b := teams.New(teams.Config{Replica: "rep_b", ReplicaAlive: func(context.Context, string) (bool, error) { return true, nil }}, st, log, c.now)
	answer := func(status int, body string) func(context.Context) teams.Answer {
		return func(context.Context) teams.Answer { return teams.Answer{Status: status, Body: []byte(body)} }
	}

	if got, _, err := a.Idempotently(t.Context(), tm.ID, "kept", "h", answer(http.StatusCreated, "one")); string(got.Body) != "one" || err != nil {
		t.Fatalf("first: %q %v", got.Body, err)
	}
	keeper.Wait()
	if got, replayed, err := b.Idempotently(t.Context(), tm.ID, "kept", "h", answer(http.StatusCreated, "two")); string(got.Body) != "one" || !replayed || err != nil {
		t.Errorf("another replica, once kept: %q replayed %v %v; want one, replayed", got.Body, replayed, err)
	}
	if n := bs.completes.Load(); n != 4 {
		t.Errorf("the answer was written %d times; want 4 (3 refused)", n)
	}

	if got, _, err := a.Idempotently(t.Context(), tm.ID, "refused", "h", answer(http.StatusBadRequest, "no")); got.Status != http.StatusBadRequest || err != nil {
		t.Fatalf("a refused request: %+v %v", got, err)
	}
	if got, replayed, err := b.Idempotently(t.Context(), tm.ID, "refused", "h", answer(http.StatusCreated, "again")); string(got.Body) != "again" || replayed || err != nil {
		t.Errorf("its retry on another replica: %q replayed %v %v; want it run again", got.Body, replayed, err)
	}
	if n := bs.rel.Load(); n != 4 {
		t.Errorf("the release was written %d times; want 4 (3 refused)", n)
	}

	ids := map[string]bool{}
	attempt := func(status int, wantResumed bool) func(context.Context) teams.Answer {
		return func(ctx context.Context) teams.Answer {
			ids[id.For(ctx, "cmd")] = true
			if id.Resumed(ctx) != wantResumed {
				t.Errorf("attempt answering %d: resumed %v", status, id.Resumed(ctx))
			}
			return teams.Answer{Status: status, Body: []byte("done")}
		}
	}
	if got, _, err := a.Idempotently(t.Context(), tm.ID, "failed", "h", attempt(http.StatusServiceUnavailable, false)); got.Status != http.StatusServiceUnavailable || err != nil {
		t.Fatalf("a failed request: %+v %v", got, err)
	}
	if n := bs.gaveUp.Load(); n != 4 {
		t.Errorf("the key was given up in %d writes; want 4 (3 refused)", n)
	}
	if got, replayed, err := b.Idempotently(t.Context(), tm.ID, "failed", "h", attempt(http.StatusCreated, true)); string(got.Body) != "done" || replayed || err != nil {
		t.Errorf("its retry on another replica: %q replayed %v %v; want it resumed", got.Body, replayed, err)
	}
	if len(ids) != 1 {
		t.Errorf("the two attempts made IDs %v; want one, the same", ids)
	}

	broken := &blinkingStore{DB: st, fail: errors.New("constraint")}
	d := teams.New(teams.Config{Replica: "rep_d"}, broken, log, c.now)
	d.Idempotently(t.Context(), tm.ID, "broken", "h", answer(http.StatusCreated, "one"))
	if n := broken.completes.Load(); n != 1 {
		t.Errorf("a write failing for good was tried %d times; want 1", n)
	}
}
