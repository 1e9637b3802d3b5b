package storetest

import (
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

func testPreviews(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createTeam(t, s, "team_b")
	createSandbox(t, s, sandbox("team_a", 1, "", api.StateRunning))
	createSandbox(t, s, sandbox("team_b", 2, "", api.StateRunning))
	p1 := store.Preview{ID: "prv_1", TeamID: "team_a", SandboxID: "sbx_0001", Port: 8000,
		Visibility: "private", Wake: true, TokenHash: "abc", CreatedAt: at(1)}
	p2 := store.Preview{ID: "prv_2", TeamID: "team_a", SandboxID: "sbx_0001", Port: 3000,
		Visibility: "public", CreatedAt: at(2)}
	p3 := store.Preview{ID: "prv_3", TeamID: "team_b", SandboxID: "sbx_0002", Port: 8000,
		Visibility: "public", CreatedAt: at(3)}
	for _, p := range []*store.Preview{&p1, &p2, &p3} {
		mustDo(t, s.CreatePreview(ctx, *p))
		p.Version = 1
	}
	dup := p1
	dup.ID = "prv_4"
	wantCode(t, s.CreatePreview(ctx, dup), api.CodeConflict)
	orphan := p1
	orphan.ID, orphan.SandboxID = "prv_5", "sbx_none"
	wantCode(t, s.CreatePreview(ctx, orphan), api.CodeNotFound)

	diff(t, "GetPreview", p1, mustGet[store.Preview](t)(s.GetPreview(ctx, "team_a", "prv_1")))
	diff(t, "GetPreview any team", p3, mustGet[store.Preview](t)(s.GetPreview(ctx, "", "prv_3")))
	_, err := s.GetPreview(ctx, "team_b", "prv_1")
	wantCode(t, err, api.CodeNotFound)
	diff(t, "PreviewByPort", p2, mustGet[store.Preview](t)(s.PreviewByPort(ctx, "sbx_0001", 3000)))
	_, err = s.PreviewByPort(ctx, "sbx_0001", 9999)
	wantCode(t, err, api.CodeNotFound)
	diff(t, "ListPreviews", []store.Preview{p1, p2}, mustGet[[]store.Preview](t)(s.ListPreviews(ctx, "sbx_0001")))
	diff(t, "ListAllPreviews", []store.Preview{p2, p1, p3}, mustGet[[]store.Preview](t)(s.ListAllPreviews(ctx)))

	wantCode(t, s.DeletePreview(ctx, "team_b", "prv_1"), api.CodeNotFound)
	mustDo(t, s.DeletePreview(ctx, "team_a", "prv_1"))
	wantCode(t, s.DeletePreview(ctx, "team_a", "prv_1"), api.CodeNotFound)
	diff(t, "ListPreviews after delete", []store.Preview{p2}, mustGet[[]store.Preview](t)(s.ListPreviews(ctx, "sbx_0001")))
	if got := mustGet[[]store.Preview](t)(s.ListPreviews(ctx, "sbx_none")); got == nil || len(got) != 0 {
		t.Errorf("ListPreviews of no sandbox = %#v; want an empty, non-nil slice", got)
	}
}

func testTeamAdmission(t *testing.T, s store.Store) {
	ctx := t.Context()
	team := createTeam(t, s, "team_a")
	want := api.Admission{ManagedEnvironment: true, Preview: true, CustomImages: true, GPU: true}
	mustDo(t, s.SetTeamAdmission(ctx, team.ID, want))
	diff(t, "admission", want, mustGet[api.Team](t)(s.GetTeam(ctx, team.ID)).Admission)
	mustDo(t, s.SetTeamAdmission(ctx, team.ID, api.Admission{}))
	diff(t, "admission cleared", api.Admission{}, mustGet[api.Team](t)(s.GetTeam(ctx, team.ID)).Admission)
	wantCode(t, s.SetTeamAdmission(ctx, "team_none", want), api.CodeNotFound)
}
