package storetest

import (
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

func secretNames(ss []store.Secret) []string {
	names := []string{}
	for _, s := range ss {
		names = append(names, s.TeamID+"/"+s.Name)
	}
	return names
}

func testSecrets(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	sec := store.Secret{
		TeamID: "team_a", Name: "github-token", KeyID: "k1",
		Nonce: []byte{1, 2, 3}, Ciphertext: []byte{0, 9, 8, 7, 0},
		CreatedAt: at(1), UpdatedAt: at(1),
	}
	created, err := s.PutSecret(ctx, sec)
	if err != nil || !created {
		t.Fatalf("PutSecret = %v, %v; want created", created, err)
	}
	want := sec
	want.CreatedAt, want.UpdatedAt = at(1).UTC(), at(1).UTC()
	diff(t, "secret", want, mustGet[store.Secret](t)(s.GetSecret(ctx, "team_a", "github-token")))

	// A second put replaces the sealed value and keeps the creation time.
	upd := sec
	upd.KeyID, upd.Nonce, upd.Ciphertext, upd.CreatedAt, upd.UpdatedAt = "k2", []byte{4}, []byte{5, 6}, at(9), at(2)
	created, err = s.PutSecret(ctx, upd)
	if err != nil || created {
		t.Fatalf("second PutSecret = %v, %v; want replaced", created, err)
	}
	want = upd
	want.CreatedAt, want.UpdatedAt = at(1).UTC(), at(2).UTC()
	diff(t, "replaced secret", want, mustGet[store.Secret](t)(s.GetSecret(ctx, "team_a", "github-token")))

	// Teams do not see each other's secrets.
	_, err = s.GetSecret(ctx, "team_b", "github-token")
	wantCode(t, err, api.CodeNotFound)
	wantCode(t, s.DeleteSecret(ctx, "team_b", "github-token"), api.CodeNotFound)
	_, err = s.PutSecret(ctx, store.Secret{TeamID: "team_x", Name: "n", KeyID: "k", Nonce: []byte{1}, Ciphertext: []byte{1}, CreatedAt: at(1), UpdatedAt: at(1)})
	wantCode(t, err, api.CodeNotFound)

	for _, n := range []string{"b", "a", "c"} {
		mustGet[bool](t)(s.PutSecret(ctx, store.Secret{TeamID: "team_b", Name: n, KeyID: "k1", Nonce: []byte{1}, Ciphertext: []byte{2}, CreatedAt: at(3), UpdatedAt: at(3)}))
	}
	list := mustGet[[]store.Secret](t)
	diff(t, "team_b", []string{"team_b/a", "team_b/b", "team_b/c"}, secretNames(list(s.ListSecrets(ctx, store.SecretFilter{TeamID: "team_b"}))))
	diff(t, "team_b page", []string{"team_b/b"}, secretNames(list(s.ListSecrets(ctx, store.SecretFilter{TeamID: "team_b", After: "a", Limit: 1}))))
	diff(t, "every team", []string{"team_a/github-token", "team_b/a", "team_b/b", "team_b/c"}, secretNames(list(s.ListSecrets(ctx, store.SecretFilter{}))))
	diff(t, "not under k1", []string{"team_a/github-token"}, secretNames(list(s.ListSecrets(ctx, store.SecretFilter{NotKeyID: "k1"}))))
	diff(t, "empty team", []string{}, secretNames(list(s.ListSecrets(ctx, store.SecretFilter{TeamID: "team_x"}))))

	// Rekey replaces only what is still sealed as it was read.
	rk := store.Secret{TeamID: "team_a", Name: "github-token", KeyID: "k3", Nonce: []byte{7}, Ciphertext: []byte{8}}
	if ok, err := s.RekeySecret(ctx, rk, []byte{1, 2, 3}); err != nil || ok {
		t.Fatalf("rekey with a stale nonce = %v, %v; want not replaced", ok, err)
	}
	if ok, err := s.RekeySecret(ctx, rk, []byte{4}); err != nil || !ok {
		t.Fatalf("rekey = %v, %v; want replaced", ok, err)
	}
	got := mustGet[store.Secret](t)(s.GetSecret(ctx, "team_a", "github-token"))
	if got.KeyID != "k3" || string(got.Nonce) != "\x07" || !got.UpdatedAt.Equal(at(2)) {
		t.Errorf("after rekey: %+v; want key k3, nonce 7, the same update time", got)
	}

	mustDo(t, s.DeleteSecret(ctx, "team_a", "github-token"))
	_, err = s.GetSecret(ctx, "team_a", "github-token")
	wantCode(t, err, api.CodeNotFound)
	wantCode(t, s.DeleteSecret(ctx, "team_a", "github-token"), api.CodeNotFound)
}
