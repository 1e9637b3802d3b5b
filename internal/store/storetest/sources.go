package storetest

import (
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// testSources covers what sources and setup keep: a sandbox's provision,
// assets (content-addressed per team) and the setup cache (LRU order).
func testSources(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")

	t.Run("provision round trip", func(t *testing.T) {
		sb := sandbox("team_a", 1, "", api.StateCreating)
		sb.Provision = api.Provision{
			Source: &api.Source{Type: api.SourceGit, URL: "https://git.example/r.git", Ref: "main", Depth: 1, AuthSecret: "tok"},
			Setup:  &api.Setup{Command: "make", Env: map[string]string{"A": "b"}, Secrets: map[string]string{"T": "tok"}, TimeoutS: 60, Cache: true},
		}
		sb = createSandbox(t, s, sb)
		sb.Provision.SetupCommandID, sb.Provision.SetupCached = "cmd_1", true
		sb.Provision.Source.Digest = "abc"
		mustDo(t, s.UpdateSandbox(ctx, sb))
		got := mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", sb.ID))
		diff(t, "provision", sb.Provision, got.Provision)
	})

	t.Run("assets", func(t *testing.T) {
		a := api.Asset{ID: "ast_1", TeamID: "team_a", Name: "src", Size: 10, SHA256: "aa", CreatedAt: at(1)}
		mustDo(t, s.CreateAsset(ctx, a))
		wantCode(t, s.CreateAsset(ctx, api.Asset{ID: "ast_2", TeamID: "team_a", Size: 10, SHA256: "aa", CreatedAt: at(2)}), api.CodeConflict)
		// Another team may hold the same bytes: they are its own.
		mustDo(t, s.CreateAsset(ctx, api.Asset{ID: "ast_3", TeamID: "team_b", Size: 10, SHA256: "aa", CreatedAt: at(2)}))
		mustDo(t, s.CreateAsset(ctx, api.Asset{ID: "ast_4", TeamID: "team_a", Size: 5, SHA256: "bb", CreatedAt: at(3)}))
		wantCode(t, s.CreateAsset(ctx, api.Asset{ID: "ast_5", TeamID: "team_x", SHA256: "cc", CreatedAt: at(3)}), api.CodeNotFound)

		diff(t, "get", a, mustGet[api.Asset](t)(s.GetAsset(ctx, "team_a", "ast_1")))
		diff(t, "by sha", a, mustGet[api.Asset](t)(s.GetAssetBySHA256(ctx, "team_a", "aa")))
		_, err := s.GetAsset(ctx, "team_b", "ast_1")
		wantCode(t, err, api.CodeNotFound)
		list := mustGet[[]api.Asset](t)(s.ListAssets(ctx, "team_a", "", 0))
		if len(list) != 2 || list[0].ID != "ast_1" || list[1].ID != "ast_4" {
			t.Fatalf("list = %+v", list)
		}
		if list = mustGet[[]api.Asset](t)(s.ListAssets(ctx, "team_a", "ast_1", 1)); len(list) != 1 || list[0].ID != "ast_4" {
			t.Fatalf("page = %+v", list)
		}
		if n := mustGet[int64](t)(s.AssetBytes(ctx, "team_a")); n != 15 {
			t.Fatalf("bytes = %d; want 15", n)
		}
		wantCode(t, s.DeleteAsset(ctx, "team_b", "ast_1"), api.CodeNotFound)
		mustDo(t, s.DeleteAsset(ctx, "team_a", "ast_1"))
		wantCode(t, s.DeleteAsset(ctx, "team_a", "ast_1"), api.CodeNotFound)
		if n := mustGet[int64](t)(s.AssetBytes(ctx, "team_a")); n != 5 {
			t.Fatalf("bytes after delete = %d; want 5", n)
		}
	})

	t.Run("setup cache", func(t *testing.T) {
		e1 := store.SetupCacheEntry{TeamID: "team_a", Key: "k1", SaveID: "s1", Size: 1, CreatedAt: at(1), LastUsedAt: at(1)}
		e2 := store.SetupCacheEntry{TeamID: "team_a", Key: "k2", SaveID: "s2", Size: 2, CreatedAt: at(2), LastUsedAt: at(2)}
		mustDo(t, s.PutSetupCache(ctx, e1))
		mustDo(t, s.PutSetupCache(ctx, e2))
		wantCode(t, s.PutSetupCache(ctx, store.SetupCacheEntry{TeamID: "team_x", Key: "k", CreatedAt: at(1), LastUsedAt: at(1)}), api.CodeNotFound)
		diff(t, "get", e1, mustGet[store.SetupCacheEntry](t)(s.GetSetupCache(ctx, "team_a", "k1")))
		_, err := s.GetSetupCache(ctx, "team_b", "k1")
		wantCode(t, err, api.CodeNotFound)
		mustDo(t, s.TouchSetupCache(ctx, "team_a", "k1", at(5)))
		list := mustGet[[]store.SetupCacheEntry](t)(s.ListSetupCache(ctx, "team_a"))
		if len(list) != 2 || list[0].Key != "k2" || list[1].Key != "k1" {
			t.Fatalf("LRU order = %+v; want k2 then k1", list)
		}
		e2.SaveID, e2.Size = "s3", 3
		mustDo(t, s.PutSetupCache(ctx, e2))
		diff(t, "replaced", e2, mustGet[store.SetupCacheEntry](t)(s.GetSetupCache(ctx, "team_a", "k2")))
		mustDo(t, s.DeleteSetupCache(ctx, "team_a", "k1"))
		wantCode(t, s.DeleteSetupCache(ctx, "team_a", "k1"), api.CodeNotFound)
		wantCode(t, s.TouchSetupCache(ctx, "team_a", "k1", at(6)), api.CodeNotFound)
	})
}
