package imagecatalog_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/control/imagecatalog"
	"github.com/cove-dev/cove/internal/id"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// The image catalog over a real SQLite store, with the node's importer
// and the core's services faked: import, who sees an image and by which
// name, the per-team byte cap, and the refusal to delete an image in use.

// importer keeps trees in memory. An archive "SIZE:TAG" unpacks to a
// tree of SIZE bytes, named by the digest of the archive.
type importer struct {
	mu      sync.Mutex
	staged  map[string]api.Image
	trees   map[string]bool
	removed []string
}

func (im *importer) StageImage(ctx context.Context, r io.Reader) (api.Image, string, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return api.Image{}, "", err
	}
	size, _, _ := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil {
		return api.Image{}, "", api.Errorf(api.CodeInvalidArgument, "not an image archive")
	}
	sum := sha256.Sum256(b)
	img := api.Image{Digest: "sha256:" + hex.EncodeToString(sum[:]), SizeBytes: n,
		Config: api.ImageConfig{UID: 1000, GID: 1000, Home: "/home/app", Shell: []string{"/bin/sh"}}}
	im.mu.Lock()
	defer im.mu.Unlock()
	handle := id.New("stage")
	im.staged[handle] = img
	return img, handle, nil
}

func (im *importer) CommitImage(ctx context.Context, handle string) (bool, error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	img := im.staged[handle]
	delete(im.staged, handle)
	created := !im.trees[img.Digest]
	im.trees[img.Digest] = true
	return created, nil
}

func (im *importer) DiscardImage(handle string) {
	im.mu.Lock()
	defer im.mu.Unlock()
	delete(im.staged, handle)
}

func (im *importer) RemoveImage(ctx context.Context, digest string) error {
	im.mu.Lock()
	defer im.mu.Unlock()
	delete(im.trees, digest)
	im.removed = append(im.removed, digest)
	return nil
}

// pending is the number of staged trees neither committed nor discarded.
func (im *importer) pending() int {
	im.mu.Lock()
	defer im.mu.Unlock()
	return len(im.staged)
}

func (im *importer) has(digest string) bool {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.trees[digest]
}

// core fakes the core's services: admissions by team, events, uploads
// into a temporary dir, workloads that use images (by image ID), and the
// server's validation.
type core struct {
	dir string

	mu     sync.Mutex
	admit  map[string]bool
	busy   map[string]bool
	open   int // uploads not released
	events []string
}

func (c *core) RequireAdmission(ctx context.Context, teamID, flag string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if flag != "custom_images" || !c.admit[teamID] {
		return api.Errorf(api.CodePermissionDenied, "team %s lacks the %q admission", teamID, flag)
	}
	return nil
}

func (c *core) Emit(ctx context.Context, teamID, typ string, data map[string]any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, typ)
}

func (c *core) SpoolImage(ctx context.Context, teamID string, body io.Reader, max int64) (*os.File, func(), error) {
	f, err := os.CreateTemp(c.dir, "upload-*")
	if err != nil {
		return nil, nil, err
	}
	if _, err := io.Copy(f, body); err != nil {
		return nil, nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	c.open++
	c.mu.Unlock()
	return f, func() {
		f.Close()
		os.Remove(f.Name())
		c.mu.Lock()
		c.open--
		c.mu.Unlock()
	}, nil
}

func (c *core) RefuseImageDelete(ctx context.Context, img api.Image, owner string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy[img.ID] {
		return api.Errorf(api.CodeConflict, "image %s is used by a workload that has not ended", img.Name)
	}
	return nil
}

func (c *core) Name(name string) error {
	if strings.ToLower(name) != name {
		return api.Errorf(api.CodeInvalidArgument, "name %q is invalid", name)
	}
	return nil
}

func (c *core) Resources(r *api.ResourcesRequest) error { return nil }

func (c *core) Policy(field string, allow []string) ([]string, error) { return allow, nil }

type fixture struct {
	cat  *imagecatalog.Catalog
	st   *sqlite.DB
	im   *importer
	core *core
	// teams by name: team-a, team-b, team-c and admin; team-a and
	// team-b have the custom_images admission.
	teams map[string]api.Team
}

func newFixture(t *testing.T, maxBytes int64) *fixture {
	t.Helper()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{st: st, im: &importer{staged: map[string]api.Image{}, trees: map[string]bool{}},
		core:  &core{dir: t.TempDir(), admit: map[string]bool{}, busy: map[string]bool{}},
		teams: map[string]api.Team{}}
	for _, name := range []string{"team-a", "team-b", "team-c", "admin"} {
		tm := api.Team{ID: id.New("team"), Name: name, CreatedAt: time.Now().UTC()}
		if err := st.CreateTeam(ctx, tm); err != nil {
			t.Fatal(err)
		}
		f.teams[name] = tm
	}
	f.core.admit[f.teams["team-a"].ID] = true
	f.core.admit[f.teams["team-b"].ID] = true
	f.core.admit[f.teams["admin"].ID] = true
	f.cat = imagecatalog.New(imagecatalog.Config{
		Templates: []string{"managed"}, MaxBytesPerTeam: maxBytes, AdminTeam: "admin",
		AdmitFlag: "custom_images", MaxCommandBytes: 1024,
	}, imagecatalog.Deps{
		Store: st, Admission: f.core, Events: f.core, Uploads: f.core, Workloads: f.core, Validate: f.core,
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Now().UTC() },
	})
	f.cat.SetImporter(f.im)
	if err := f.cat.Load(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) importImage(t *testing.T, team, name, archive string, st api.ImageSettings) api.Image {
	t.Helper()
	img, err := f.cat.ImportImage(t.Context(), f.teams[team], name, st, strings.NewReader(archive))
	if err != nil {
		t.Fatalf("import %s as %s: %v", name, team, err)
	}
	return img
}

// sandbox stores a sandbox of team that names template, in state.
func (f *fixture) sandbox(t *testing.T, team, template string, state api.SandboxState) {
	t.Helper()
	sb := api.Sandbox{ID: id.New("sbx"), TeamID: f.teams[team].ID, State: state, Template: template,
		CreatedAt: time.Now().UTC(), Labels: map[string]string{}}
	if err := f.st.CreateSandbox(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, err error, want api.Code) {
	t.Helper()
	if got := api.ErrorCode(err); got != want {
		t.Fatalf("error %v (%s), want %s", err, got, want)
	}
}

// TestImageVisibility: an image is seen by its team (as NAME), by the
// teams its admission names and by every team when it admits all (as
// TEAM/NAME), and by the admin team; to every other team it does not
// exist, whichever way it is asked for. Only its team and the admin
// manage it.
func TestImageVisibility(t *testing.T) {
	tests := []struct {
		name      string
		admission api.ImageAdmission
		viewer    string
		wantSeen  bool
		wantName  string // the template name the viewer gives it
	}{
		{"owner mode, its team", api.ImageAdmission{Mode: api.ImageAdmitOwner}, "team-a", true, "tools"},
		{"owner mode, another team", api.ImageAdmission{Mode: api.ImageAdmitOwner}, "team-b", false, ""},
		{"owner mode, the admin", api.ImageAdmission{Mode: api.ImageAdmitOwner}, "admin", true, "team-a/tools"},
		{"teams mode, a team named", api.ImageAdmission{Mode: api.ImageAdmitTeams, Teams: []string{"team-b"}}, "team-b", true, "team-a/tools"},
		{"teams mode, a team not named", api.ImageAdmission{Mode: api.ImageAdmitTeams, Teams: []string{"team-b"}}, "team-c", false, ""},
		{"all mode, any team", api.ImageAdmission{Mode: api.ImageAdmitAll}, "team-c", true, "team-a/tools"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 1<<30)
			ctx := t.Context()
			img := f.importImage(t, "team-a", "tools", "10:tools", api.ImageSettings{})
			adm := tt.admission
			for i, name := range adm.Teams {
				adm.Teams[i] = f.teams[name].ID
			}
			// Only the admin may admit all teams.
			by := f.teams["team-a"]
			if adm.Mode == api.ImageAdmitAll {
				by = f.teams["admin"]
			}
			if _, err := f.cat.UpdateImage(ctx, by, img.ID, api.ImageSettings{Admission: &adm}); err != nil {
				t.Fatal(err)
			}
			viewer := f.teams[tt.viewer]

			l, err := f.cat.ListImages(ctx, viewer)
			if err != nil {
				t.Fatal(err)
			}
			var listed []string
			for _, i := range l.Items {
				listed = append(listed, i.Template)
			}
			if want := []string{tt.wantName}; tt.wantSeen && !slices.Equal(listed, want) || !tt.wantSeen && len(listed) != 0 {
				t.Errorf("listed %q", listed)
			}
			for _, ref := range []string{img.ID, "team-a/tools"} {
				got, err := f.cat.GetImage(ctx, viewer, ref)
				if !tt.wantSeen {
					wantCode(t, err, api.CodeNotFound)
					continue
				}
				if err != nil || got.Template != tt.wantName {
					t.Errorf("get %s: %+v %v", ref, got, err)
				}
			}
			req := api.CreateSandboxRequest{Template: "team-a/tools"}
			used, release, err := f.cat.Use(ctx, viewer.ID, &req)
			release()
			if !tt.wantSeen {
				wantCode(t, err, api.CodeNotFound)
			} else if err != nil || used == nil || used.ID != img.ID {
				t.Errorf("use: %+v %v", used, err)
			}
			if tt.viewer != "team-a" && tt.viewer != "admin" {
				want := api.Code(api.CodeNotFound)
				if tt.wantSeen {
					want = api.CodePermissionDenied
				}
				wantCode(t, f.cat.DeleteImage(ctx, viewer, img.ID), want)
			}
		})
	}
}

// TestImportRefusals: an import is refused, keeping no row and no tree,
// without the admission, for a missing or bad name, a name of the
// server's templates or of another image of the team, an unknown team to
// admit, admitting all teams unless an admin, and a bad archive.
func TestImportRefusals(t *testing.T) {
	tests := []struct {
		name     string
		team     string
		image    string
		settings api.ImageSettings
		archive  string
		want     api.Code
	}{
		{"no admission", "team-c", "tools", api.ImageSettings{}, "10:x", api.CodePermissionDenied},
		{"no name", "team-a", "", api.ImageSettings{}, "10:x", api.CodeInvalidArgument},
		{"a bad name", "team-a", "Tools", api.ImageSettings{}, "10:x", api.CodeInvalidArgument},
		{"a template's name", "team-a", "managed", api.ImageSettings{}, "10:x", api.CodeConflict},
		{"a name the team uses", "team-a", "taken", api.ImageSettings{}, "10:y", api.CodeConflict},
		{"an unknown team admitted", "team-a", "tools", api.ImageSettings{Admission: &api.ImageAdmission{Mode: api.ImageAdmitTeams, Teams: []string{"team_nope"}}}, "10:x", api.CodeInvalidArgument},
		{"all teams, not an admin", "team-a", "tools", api.ImageSettings{Admission: &api.ImageAdmission{Mode: api.ImageAdmitAll}}, "10:x", api.CodePermissionDenied},
		{"not an archive", "team-a", "tools", api.ImageSettings{}, "junk", api.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 1<<30)
			ctx := t.Context()
			taken := f.importImage(t, "team-a", "taken", "10:taken", api.ImageSettings{})
			_, err := f.cat.ImportImage(ctx, f.teams[tt.team], tt.image, tt.settings, strings.NewReader(tt.archive))
			wantCode(t, err, tt.want)
			all, err := f.st.ListImages(ctx)
			if err != nil || len(all) != 1 || all[0].ID != taken.ID {
				t.Errorf("images kept: %+v %v", all, err)
			}
			if f.im.pending() != 0 || f.core.open != 0 || len(f.im.trees) != 1 {
				t.Errorf("left behind: %d staged, %d uploads, %d trees", f.im.pending(), f.core.open, len(f.im.trees))
			}
		})
	}
}

// TestImageByteCap: a team's images' trees take at most the cap; an
// import past it is refused with 507 and keeps nothing; other teams'
// images do not count against it; a delete makes room.
func TestImageByteCap(t *testing.T) {
	f := newFixture(t, 100)
	ctx := t.Context()
	var first api.Image
	steps := []struct {
		name    string
		team    string
		image   string
		archive string
		del     bool // delete the first image instead
		want    api.Code
	}{
		{name: "60 of 100", team: "team-a", image: "one", archive: "60:one"},
		{name: "another team's 90", team: "team-b", image: "big", archive: "90:big"},
		{name: "50 more", team: "team-a", image: "two", archive: "50:two", want: api.CodeInsufficientStorage},
		{name: "40 more, to the byte", team: "team-a", image: "three", archive: "40:three"},
		{name: "one byte more", team: "team-a", image: "four", archive: "1:four", want: api.CodeInsufficientStorage},
		{name: "a delete", team: "team-a", del: true},
		{name: "50 after the delete", team: "team-a", image: "two", archive: "50:two"},
	}
	for _, s := range steps {
		if s.del {
			if err := f.cat.DeleteImage(ctx, f.teams[s.team], first.ID); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			continue
		}
		img, err := f.cat.ImportImage(ctx, f.teams[s.team], s.image, api.ImageSettings{}, strings.NewReader(s.archive))
		if s.want != "" {
			wantCode(t, err, s.want)
			if _, err := f.st.GetImageByName(ctx, f.teams[s.team].ID, s.image); api.ErrorCode(err) != api.CodeNotFound {
				t.Fatalf("%s: the refused image was stored (%v)", s.name, err)
			}
			if f.im.pending() != 0 {
				t.Fatalf("%s: a refused tree was kept", s.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if first.ID == "" {
			first = img
		}
	}
	if n, err := f.cat.TeamBytes(ctx, f.teams["team-a"].ID); err != nil || n != 90 {
		t.Errorf("team-a's bytes %d %v, want 90", n, err)
	}
}

// TestDeleteInUse: an image is not deleted while a sandbox that is not
// terminated (or failed) names it, by its own name in its team or as
// TEAM/NAME in another, nor while a workload that has not ended uses it;
// its row and tree stay. Once nothing uses it, it and its tree go.
func TestDeleteInUse(t *testing.T) {
	tests := []struct {
		name     string
		team     string // of the sandbox
		template string
		state    api.SandboxState
		workload bool
		want     api.Code
	}{
		{name: "running sandbox", team: "team-a", template: "tools", state: api.StateRunning, want: api.CodeConflict},
		{name: "asleep sandbox", team: "team-a", template: "tools", state: api.StateAsleep, want: api.CodeConflict},
		{name: "creating sandbox", team: "team-a", template: "tools", state: api.StateCreating, want: api.CodeConflict},
		{name: "another team's, qualified", team: "team-b", template: "team-a/tools", state: api.StateRunning, want: api.CodeConflict},
		{name: "terminated sandbox", team: "team-a", template: "tools", state: api.StateTerminated},
		{name: "failed sandbox", team: "team-a", template: "tools", state: api.StateFailed},
		{name: "another team's own name", team: "team-b", template: "tools", state: api.StateRunning},
		{name: "a queued workload", workload: true, want: api.CodeConflict},
		{name: "nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, 1<<30)
			ctx := t.Context()
			img := f.importImage(t, "team-a", "tools", "10:tools", api.ImageSettings{
				Admission: &api.ImageAdmission{Mode: api.ImageAdmitTeams, Teams: []string{f.teams["team-b"].ID}}})
			if tt.template != "" {
				f.sandbox(t, tt.team, tt.template, tt.state)
			}
			f.core.busy[img.ID] = tt.workload
			err := f.cat.DeleteImage(ctx, f.teams["team-a"], img.ID)
			_, gerr := f.st.GetImage(ctx, img.ID)
			_, known := f.cat.Image(f.teams["team-a"].ID, "tools")
			if tt.want != "" {
				wantCode(t, err, tt.want)
				if gerr != nil || !f.im.has(img.Digest) || !known {
					t.Fatalf("a refused delete lost the image: row %v, tree %v, known %v", gerr, f.im.has(img.Digest), known)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if api.ErrorCode(gerr) != api.CodeNotFound || f.im.has(img.Digest) || known {
				t.Fatalf("deleted image kept: row %v, tree %v, known %v", gerr, f.im.has(img.Digest), known)
			}
		})
	}
}

// TestSharedTree: two images of the same archive share one tree, which
// goes with the last of them.
func TestSharedTree(t *testing.T) {
	f := newFixture(t, 1<<30)
	ctx := t.Context()
	a := f.importImage(t, "team-a", "base", "10:same", api.ImageSettings{})
	b := f.importImage(t, "team-b", "base", "10:same", api.ImageSettings{})
	if a.Digest != b.Digest || len(f.im.trees) != 1 {
		t.Fatalf("digests %s %s, %d trees", a.Digest, b.Digest, len(f.im.trees))
	}
	if err := f.cat.DeleteImage(ctx, f.teams["team-a"], a.ID); err != nil {
		t.Fatal(err)
	}
	if !f.im.has(a.Digest) {
		t.Fatal("the tree went with the first of its two images")
	}
	if err := f.cat.DeleteImage(ctx, f.teams["team-b"], b.ID); err != nil {
		t.Fatal(err)
	}
	if f.im.has(a.Digest) {
		t.Fatal("the tree stayed after its last image")
	}
}
