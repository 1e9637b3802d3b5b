package storetest

import (
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// testIdempotency checks the claims on Idempotency-Keys: one claim per
// team and key, conditional on its owner for every change, expiry.
func testIdempotency(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	c := store.IdempotencyClaim{TeamID: "team_a", Key: "k1", RequestHash: "h1", Owner: "rep_1", Seed: []byte{1, 2, 3}, ClaimedAt: at(1)}
	pending := store.Idempotent{TeamID: "team_a", Key: "k1", RequestHash: "h1", Owner: "rep_1", Seed: []byte{1, 2, 3}, Body: []byte{}, CreatedAt: at(1).UTC()}

	got, claimed, err := s.ClaimIdempotent(ctx, c)
	mustDo(t, err)
	if !claimed || !got.Pending() {
		t.Fatalf("first claim: claimed %v, pending %v; want both", claimed, got.Pending())
	}
	diff(t, "first claim", pending, got)

	// A second claim, from any replica, finds the first pending.
	again := c
	again.Owner, again.Seed, again.ClaimedAt = "rep_2", []byte{9}, at(2)
	got, claimed, err = s.ClaimIdempotent(ctx, again)
	mustDo(t, err)
	if claimed {
		t.Fatal("a second claim on a pending key was granted")
	}
	diff(t, "second claim", pending, got)

	// Only the owner completes or releases it.
	wantCode(t, s.CompleteIdempotent(ctx, "team_a", "k1", "rep_2", 201, []byte("x")), api.CodeConflict)
	wantCode(t, s.ReleaseIdempotent(ctx, "team_a", "k1", "rep_2"), api.CodeConflict)

	// A take-over is conditional on the dead owner: of two replicas taking
	// it over, one wins.
	_, err = s.TakeOverIdempotent(ctx, "team_a", "k1", "rep_9", "rep_2")
	wantCode(t, err, api.CodeConflict)
	got, err = s.TakeOverIdempotent(ctx, "team_a", "k1", "rep_1", "rep_2")
	mustDo(t, err)
	taken := pending
	taken.Owner = "rep_2"
	diff(t, "taken over", taken, got)
	_, err = s.TakeOverIdempotent(ctx, "team_a", "k1", "rep_1", "rep_3")
	wantCode(t, err, api.CodeConflict)
	// The dead owner, back after all, can no longer answer for it.
	wantCode(t, s.CompleteIdempotent(ctx, "team_a", "k1", "rep_1", 201, []byte("x")), api.CodeConflict)

	mustDo(t, s.CompleteIdempotent(ctx, "team_a", "k1", "rep_2", 201, []byte(`{"id":"sbx_1"}`)))
	answered := taken
	answered.Status, answered.Body = 201, []byte(`{"id":"sbx_1"}`)
	got, claimed, err = s.ClaimIdempotent(ctx, again)
	mustDo(t, err)
	if claimed || got.Pending() {
		t.Fatalf("claim on an answered key: claimed %v, pending %v; want neither", claimed, got.Pending())
	}
	diff(t, "answered", answered, got)
	// An answer is final.
	wantCode(t, s.CompleteIdempotent(ctx, "team_a", "k1", "rep_2", 500, nil), api.CodeConflict)
	wantCode(t, s.ReleaseIdempotent(ctx, "team_a", "k1", "rep_2"), api.CodeConflict)
	_, err = s.TakeOverIdempotent(ctx, "team_a", "k1", "rep_2", "rep_3")
	wantCode(t, err, api.CodeConflict)
	wantCode(t, s.CompleteIdempotent(ctx, "team_a", "k1", "rep_2", 0, nil), api.CodeInternal)

	// Keys are per team.
	b := store.IdempotencyClaim{TeamID: "team_b", Key: "k1", RequestHash: "h2", Owner: "rep_1", ClaimedAt: at(5)}
	if _, claimed, err := s.ClaimIdempotent(ctx, b); err != nil || !claimed {
		t.Fatalf("claim of another team's key: claimed %v, err %v", claimed, err)
	}
	// A released claim is gone: the key may be claimed again.
	mustDo(t, s.ReleaseIdempotent(ctx, "team_b", "k1", "rep_1"))
	if _, claimed, err := s.ClaimIdempotent(ctx, b); err != nil || !claimed {
		t.Fatalf("claim after release: claimed %v, err %v", claimed, err)
	}
	_, _, err = s.ClaimIdempotent(ctx, store.IdempotencyClaim{TeamID: "team_missing", Key: "k", Owner: "rep_1", ClaimedAt: at(1)})
	wantCode(t, err, api.CodeNotFound)

	mustDo(t, s.DeleteIdempotentBefore(ctx, at(3)))
	if _, claimed, err := s.ClaimIdempotent(ctx, c); err != nil || !claimed {
		t.Fatalf("claim after expiry: claimed %v, err %v", claimed, err)
	}
	if got, claimed, err := s.ClaimIdempotent(ctx, b); err != nil || claimed || got.CreatedAt != at(5).UTC() {
		t.Fatalf("newer record: claimed %v, err %v, %+v; want it kept", claimed, err, got)
	}
}
