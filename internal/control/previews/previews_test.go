package previews_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/previews"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/node"
	"github.com/cove-dev/cove/internal/node/nodetest"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// The previews' service over a real SQLite store and the fake node, with
// the lifecycle and the admissions faked: the rules of publishing and of
// letting a preview's request in.

// lifecycle is a fake of the sandboxes' lifecycle over the store: a lock
// per sandbox, and a wake that only changes the stored state.
type lifecycle struct {
	st *sqlite.DB
	nd *nodetest.Node

	mu      sync.Mutex
	locks   map[string]*sync.Mutex
	touched []string
}

func (l *lifecycle) GetSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, error) {
	sb, err := l.st.GetSandbox(ctx, teamID, ref)
	if api.ErrorCode(err) == api.CodeNotFound {
		return l.st.GetSandboxByName(ctx, teamID, ref)
	}
	return sb, err
}

func (l *lifecycle) LockSandbox(ctx context.Context, teamID, ref string) (api.Sandbox, func(), error) {
	sb, err := l.GetSandbox(ctx, teamID, ref)
	if err != nil {
		return sb, nil, err
	}
	l.mu.Lock()
	m, ok := l.locks[sb.ID]
	if !ok {
		m = &sync.Mutex{}
		l.locks[sb.ID] = m
	}
	l.mu.Unlock()
	m.Lock()
	sb, err = l.st.GetSandbox(ctx, teamID, sb.ID)
	if err != nil {
		m.Unlock()
		return sb, nil, err
	}
	return sb, m.Unlock, nil
}

func (l *lifecycle) LiveSandbox(ctx context.Context, teamID, ref string, wake bool) (api.Sandbox, error) {
	sb, err := l.GetSandbox(ctx, teamID, ref)
	if err != nil {
		return sb, err
	}
	switch {
	case sb.State == api.StateRunning:
		return sb, nil
	case sb.State == api.StateAsleep && wake:
		sb.State = api.StateRunning
		if err := l.st.UpdateSandbox(ctx, sb); err != nil {
			return sb, err
		}
		return sb, l.nd.Start(ctx, node.SandboxSpec{ID: sb.ID})
	}
	return sb, api.Errorf(api.CodeConflict, "sandbox %s is %s", sb.ID, sb.State)
}

func (l *lifecycle) Touch(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.touched = append(l.touched, id)
}

// admission admits the teams it holds.
type admission struct {
	mu sync.Mutex
	ok map[string]bool
}

func (a *admission) set(team string, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ok[team] = ok
}

func (a *admission) RequireAdmission(ctx context.Context, teamID, flag string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if flag != "preview" || !a.ok[teamID] {
		return api.Errorf(api.CodePermissionDenied, "team %s lacks the %q admission", teamID, flag)
	}
	return nil
}

type fixture struct {
	svc  *previews.Service
	st   *sqlite.DB
	node *nodetest.Node
	life *lifecycle
	adm  *admission
	// a and b are two teams; a has the preview admission.
	a, b string
}

func newFixture(t *testing.T, maxPerSandbox int) *fixture {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	nd := nodetest.New()
	t.Cleanup(nd.Close)
	f := &fixture{st: st, node: nd, life: &lifecycle{st: st, nd: nd, locks: map[string]*sync.Mutex{}},
		adm: &admission{ok: map[string]bool{}}}
	for i, name := range []string{"team-a", "team-b"} {
		tm := api.Team{ID: id.New("team"), Name: name, CreatedAt: time.Now().UTC()}
		if err := st.CreateTeam(ctx, tm); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			f.a = tm.ID
		} else {
			f.b = tm.ID
		}
	}
	f.adm.set(f.a, true)
	f.svc = previews.New(previews.Config{MaxPerSandbox: maxPerSandbox, AdmitFlag: "preview"}, previews.Deps{
		Store: st, Lifecycle: f.life, Admission: f.adm,
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Now().UTC() },
	})
	f.svc.SetNode(nd)
	f.svc.SetURLs(previews.URLs{Domain: "preview.test"})
	return f
}

// sandbox stores a sandbox of team in state; a running one runs on the
// node.
func (f *fixture) sandbox(t *testing.T, team, name string, state api.SandboxState) api.Sandbox {
	t.Helper()
	now := time.Now().UTC()
	sb := api.Sandbox{ID: id.New("sbx"), TeamID: team, Name: name, State: state, Template: "managed",
		CreatedAt: now, Labels: map[string]string{}}
	if err := f.st.CreateSandbox(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	sb.Version = 1 // as stored
	if state == api.StateRunning {
		if err := f.node.Start(t.Context(), node.SandboxSpec{ID: sb.ID}); err != nil {
			t.Fatal(err)
		}
	}
	return sb
}

func wantCode(t *testing.T, err error, want api.Code) {
	t.Helper()
	if got := api.ErrorCode(err); got != want {
		t.Fatalf("error %v (%s), want %s", err, got, want)
	}
}

// TestPublishCap: a sandbox publishes at most MaxPerSandbox previews; a
// delete makes room; only a sandbox that lives publishes; each create and
// delete changes one port on the node.
func TestPublishCap(t *testing.T) {
	f := newFixture(t, 2)
	ctx := t.Context()
	f.adm.set(f.b, true)
	sb := f.sandbox(t, f.a, "web", api.StateRunning)
	gone := f.sandbox(t, f.a, "old", api.StateTerminated)
	var ids []string
	steps := []struct {
		name      string
		team      string
		ref       string
		port      int
		del       int // delete ids[del-1] instead of creating
		want      api.Code
		wantPorts []int
	}{
		{name: "first", team: f.a, ref: sb.ID, port: 8000, wantPorts: []int{8000}},
		{name: "by name", team: f.a, ref: "web", port: 8001, wantPorts: []int{8000, 8001}},
		{name: "over the cap", team: f.a, ref: sb.ID, port: 8002, want: api.CodeConflict, wantPorts: []int{8000, 8001}},
		{name: "a delete makes room", team: f.a, ref: sb.ID, del: 1, wantPorts: []int{8001}},
		{name: "after the delete", team: f.a, ref: sb.ID, port: 8002, wantPorts: []int{8001, 8002}},
		{name: "the same port twice", team: f.a, ref: sb.ID, port: 8001, want: api.CodeConflict, wantPorts: []int{8001, 8002}},
		{name: "another team's sandbox", team: f.b, ref: sb.ID, port: 9000, want: api.CodeNotFound, wantPorts: []int{8001, 8002}},
		{name: "a terminated sandbox", team: f.a, ref: gone.ID, port: 9000, want: api.CodeConflict},
		{name: "port 0", team: f.a, ref: sb.ID, port: 0, want: api.CodeInvalidArgument, wantPorts: []int{8001, 8002}},
	}
	for _, s := range steps {
		var err error
		if s.del > 0 {
			err = f.svc.DeletePreview(ctx, s.team, s.ref, ids[s.del-1])
		} else {
			var p api.Preview
			p, err = f.svc.CreatePreview(ctx, s.team, s.ref, api.CreatePreviewRequest{Port: s.port, Visibility: api.VisibilityPublic})
			if err == nil {
				ids = append(ids, p.ID)
			}
		}
		if got := api.ErrorCode(err); (err == nil) != (s.want == "") || (err != nil && got != s.want) {
			t.Fatalf("%s: error %v, want %q", s.name, err, s.want)
		}
		ref := sb.ID
		if s.ref == gone.ID {
			ref = gone.ID
		}
		if got := f.node.Published(ref); !slices.Equal(got, s.wantPorts) {
			t.Fatalf("%s: published %v, want %v", s.name, got, s.wantPorts)
		}
	}
	l, err := f.svc.ListPreviews(ctx, f.a, sb.ID)
	if err != nil || len(l.Items) != 2 {
		t.Fatalf("list: %v %+v", err, l)
	}
}

// TestPrivateAccess: a private preview lets in only a request that
// carries its own token, while its team keeps the preview admission; a
// public one lets in every request.
func TestPrivateAccess(t *testing.T) {
	f := newFixture(t, 5)
	ctx := t.Context()
	sb := f.sandbox(t, f.a, "web", api.StateRunning)
	private, err := f.svc.CreatePreview(ctx, f.a, sb.ID, api.CreatePreviewRequest{Port: 8000})
	if err != nil {
		t.Fatal(err)
	}
	other, err := f.svc.CreatePreview(ctx, f.a, sb.ID, api.CreatePreviewRequest{Port: 8001, Visibility: api.VisibilityPrivate})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.CreatePreview(ctx, f.a, sb.ID, api.CreatePreviewRequest{Port: 8002, Visibility: api.VisibilityPublic}); err != nil {
		t.Fatal(err)
	}
	if private.Visibility != api.VisibilityPrivate || !strings.HasPrefix(private.Token, previews.TokenPrefix) || private.Token == other.Token {
		t.Fatalf("private preview %+v", private)
	}
	tests := []struct {
		name    string
		sandbox string
		port    int
		tokens  []string
		revoke  bool
		want    api.Code
	}{
		{"no token", sb.ID, 8000, nil, false, api.CodeUnauthenticated},
		{"a wrong token", sb.ID, 8000, []string{previews.TokenPrefix + "0"}, false, api.CodeUnauthenticated},
		{"another preview's token", sb.ID, 8000, []string{other.Token}, false, api.CodeUnauthenticated},
		{"its token", sb.ID, 8000, []string{private.Token}, false, ""},
		{"its token among others", sb.ID, 8000, []string{other.Token, private.Token}, false, ""},
		{"public without a token", sb.ID, 8002, nil, false, ""},
		{"a port not published", sb.ID, 8003, []string{private.Token}, false, api.CodeNotFound},
		{"a sandbox's name", "web", 8000, []string{private.Token}, false, api.CodeNotFound},
		{"admission taken away", sb.ID, 8000, []string{private.Token}, true, api.CodePermissionDenied},
		{"public, admission taken away", sb.ID, 8002, nil, true, api.CodePermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.adm.set(f.a, !tt.revoke)
			defer f.adm.set(f.a, true)
			p, err := f.svc.OpenPreview(ctx, tt.sandbox, tt.port, tt.tokens)
			if tt.want != "" {
				wantCode(t, err, tt.want)
				return
			}
			if err != nil || p.Port != tt.port || p.Token != "" {
				t.Fatalf("open: %+v %v", p, err)
			}
		})
	}
}

// TestOneTimeLink: a private preview's link gives its token once, only
// for its own port, and not after ten minutes.
func TestOneTimeLink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 5)
		ctx := t.Context()
		sb := f.sandbox(t, f.a, "web", api.StateRunning)
		code := func(p api.Preview) string {
			_, c, ok := strings.Cut(p.Link, previews.LinkParam+"=")
			if !ok || c == "" {
				t.Fatalf("link %q", p.Link)
			}
			return c
		}
		p, err := f.svc.CreatePreview(ctx, f.a, sb.ID, api.CreatePreviewRequest{Port: 8000})
		if err != nil {
			t.Fatal(err)
		}
		q, err := f.svc.CreatePreview(ctx, f.a, sb.ID, api.CreatePreviewRequest{Port: 8001})
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.svc.RedeemPreviewLink(ctx, sb.ID, 8001, code(p))
		wantCode(t, err, api.CodeUnauthenticated)
		if tok, err := f.svc.RedeemPreviewLink(ctx, sb.ID, 8000, code(p)); err != nil || tok != p.Token {
			t.Fatalf("redeem: %q %v", tok, err)
		}
		_, err = f.svc.RedeemPreviewLink(ctx, sb.ID, 8000, code(p))
		wantCode(t, err, api.CodeUnauthenticated)

		time.Sleep(10*time.Minute - time.Second)
		if tok, err := f.svc.RedeemPreviewLink(ctx, sb.ID, 8001, code(q)); err != nil || tok != q.Token {
			t.Fatalf("redeem before ten minutes: %q %v", tok, err)
		}
		r, err := f.svc.CreatePreview(ctx, f.a, sb.ID, api.CreatePreviewRequest{Port: 8002})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10*time.Minute + time.Second)
		_, err = f.svc.RedeemPreviewLink(ctx, sb.ID, 8002, code(r))
		wantCode(t, err, api.CodeUnauthenticated)
	})
}

// TestWakeDialWait: a refused connection to the port of a sandbox that a
// preview's request just woke is tried again for a minute; of a sandbox
// that ran already, it is answered at once. An asleep sandbox whose
// preview does not wake it stays asleep.
func TestWakeDialWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, 5)
		ctx := t.Context()
		up := f.sandbox(t, f.a, "up", api.StateRunning)
		nap := f.sandbox(t, f.a, "nap", api.StateRunning)
		for _, sb := range []api.Sandbox{up, nap} {
			if _, err := f.svc.CreatePreview(ctx, f.a, sb.ID, api.CreatePreviewRequest{Port: 8000, Visibility: api.VisibilityPublic, Wake: sb.ID == nap.ID}); err != nil {
				t.Fatal(err)
			}
		}
		doze := f.sandbox(t, f.a, "doze", api.StateRunning)
		if _, err := f.svc.CreatePreview(ctx, f.a, doze.ID, api.CreatePreviewRequest{Port: 8000, Visibility: api.VisibilityPublic}); err != nil {
			t.Fatal(err)
		}
		for _, sb := range []api.Sandbox{nap, doze} {
			sb.State = api.StateAsleep
			if err := f.st.UpdateSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
			f.node.DestroyRuntime(ctx, sb.ID)
		}

		_, err := f.svc.OpenPreview(ctx, doze.ID, 8000, nil)
		wantCode(t, err, api.CodeUnavailable)
		if sb, _ := f.st.GetSandbox(ctx, f.a, doze.ID); sb.State != api.StateAsleep {
			t.Fatalf("a preview without wake left the sandbox %s", sb.State)
		}

		for _, tt := range []struct {
			sb   api.Sandbox
			wait time.Duration
		}{{up, 0}, {nap, time.Minute}} {
			if _, err := f.svc.OpenPreview(ctx, tt.sb.ID, 8000, nil); err != nil {
				t.Fatalf("open %s: %v", tt.sb.Name, err)
			}
			start := time.Now()
			_, err := f.svc.DialPreview(ctx, tt.sb.ID, 8000)
			wantCode(t, err, api.CodeUnavailable)
			if got := time.Since(start); got < tt.wait || got > tt.wait+time.Second {
				t.Errorf("%s: the dial gave up after %v, want %v", tt.sb.Name, got, tt.wait)
			}
		}
		if !slices.Contains(f.life.touched, up.ID) {
			t.Errorf("a dial did not count as activity: %v", f.life.touched)
		}
	})
}

// TestPublishAll: after a restart the node publishes again the ports of
// every sandbox that lives, and of no terminated one.
func TestPublishAll(t *testing.T) {
	f := newFixture(t, 5)
	ctx := t.Context()
	live := f.sandbox(t, f.a, "live", api.StateRunning)
	ended := f.sandbox(t, f.a, "ended", api.StateRunning)
	for _, sb := range []api.Sandbox{live, ended} {
		for _, port := range []int{3000, 4000} {
			if _, err := f.svc.CreatePreview(ctx, f.a, sb.ID, api.CreatePreviewRequest{Port: port, Visibility: api.VisibilityPublic}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ended.State = api.StateTerminated
	if err := f.st.UpdateSandbox(ctx, ended); err != nil {
		t.Fatal(err)
	}
	// A restarted node has forgotten every port.
	fresh := nodetest.New()
	defer fresh.Close()
	f.svc.SetNode(fresh)
	if err := f.svc.PublishAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fresh.Published(live.ID); !slices.Equal(got, []int{3000, 4000}) {
		t.Errorf("live sandbox publishes %v", got)
	}
	if got := fresh.Published(ended.ID); len(got) != 0 {
		t.Errorf("terminated sandbox publishes %v", got)
	}
}
