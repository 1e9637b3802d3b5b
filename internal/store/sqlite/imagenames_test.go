package sqlite

import (
	"io/fs"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/cove-dev/cove/api"
)

// TestImageNamesPerTeamMigration upgrades a database whose image names
// were unique across the server: the owner's sandboxes keep naming its
// image by its bare name, other teams' sandboxes and workloads now name
// it OWNER/NAME, and a second team may then use the same name.
func TestImageNamesPerTeamMigration(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "cove.db")
	// The schema as it was before: every migration up to 0014.
	old := fstest.MapFS{}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if filepath.Base(name) >= "0015" {
			continue
		}
		b, err := fs.ReadFile(migrations, name)
		if err != nil {
			t.Fatal(err)
		}
		old[name] = &fstest.MapFile{Data: b}
	}
	if err := ownerOnly(path); err != nil {
		t.Fatal(err)
	}
	pool, err := openPool(path, 1, "immediate", []string{"foreign_keys(1)"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate(ctx, pool, old, time.Now); err != nil {
		t.Fatal(err)
	}
	now := formatTime(time.Now())
	for _, q := range []string{
		`INSERT INTO teams (id, name, created_at) VALUES ('team_a', 'alpha', '` + now + `'), ('team_b', 'beta', '` + now + `')`,
		`INSERT INTO images (id, name, team_id, digest, config, settings, created_at, updated_at)
			VALUES ('img_1', 'tools', 'team_a', 'sha256:aa', '{}', '{}', '` + now + `', '` + now + `')`,
		`INSERT INTO sandboxes (id, team_id, template, state, created_at) VALUES
			('sbx_a', 'team_a', 'tools', 'running', '` + now + `'),
			('sbx_b', 'team_b', 'tools', 'asleep', '` + now + `'),
			('sbx_c', 'team_b', 'busybox', 'running', '` + now + `')`,
		`INSERT INTO workloads (id, team_id, state, created_at, data) VALUES
			('wl_a', 'team_a', 'queued', '` + now + `', '{"id":"wl_a","template":"tools"}'),
			('wl_b', 'team_b', 'queued', '` + now + `', '{"id":"wl_b","template":"tools"}')`,
	} {
		if _, err := pool.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	pool.Close()

	db := openTest(t, path)
	for id, want := range map[string]string{"sbx_a": "tools", "sbx_b": "alpha/tools", "sbx_c": "busybox"} {
		team := map[bool]string{true: "team_a", false: "team_b"}[id == "sbx_a"]
		sb, err := db.GetSandbox(ctx, team, id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Template != want {
			t.Errorf("%s: template %q after the upgrade; want %q", id, sb.Template, want)
		}
	}
	for id, want := range map[string]string{"wl_a": "tools", "wl_b": "alpha/tools"} {
		var got string
		if err := db.read.QueryRowContext(ctx, "SELECT json_extract(data, '$.template') FROM workloads WHERE id = ?", id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: template %q after the upgrade; want %q", id, got, want)
		}
	}
	if img, err := db.GetImageByName(ctx, "team_a", "tools"); err != nil || img.ID != "img_1" {
		t.Errorf("the image after the upgrade: %+v, %v", img, err)
	}
	// The name is now free for another team.
	b := api.Image{ID: "img_2", Name: "tools", TeamID: "team_b", Digest: "sha256:bb", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := db.CreateImage(ctx, b); err != nil {
		t.Errorf("a second team's image of the same name: %v", err)
	}
}
