package storetest

import (
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

// testLeases: a lease is taken when free, renewed by its holder, refused
// to another while it runs, taken over once it expired (the term moves),
// and released for another to take at once.
func testLeases(t *testing.T, s store.Store) {
	ctx := t.Context()
	const hour = time.Hour
	a := mustGet[store.Lease](t)(s.AcquireLease(ctx, "leader", "rep_a", hour))
	if a.Name != "leader" || a.Holder != "rep_a" || a.Term != 1 {
		t.Fatalf("first acquire = %+v; want rep_a in term 1", a)
	}
	if left := time.Until(a.ExpiresAt); left < 50*time.Minute || left > hour+time.Minute {
		t.Errorf("expires in %v; want about an hour", left)
	}
	b := mustGet[store.Lease](t)(s.AcquireLease(ctx, "leader", "rep_b", hour))
	if b.Holder != "rep_a" || b.Term != 1 || !b.ExpiresAt.Equal(a.ExpiresAt) {
		t.Fatalf("another's acquire of a running lease = %+v; want rep_a's lease unchanged (%+v)", b, a)
	}
	other := mustGet[store.Lease](t)(s.AcquireLease(ctx, "other", "rep_b", hour))
	if other.Holder != "rep_b" || other.Term != 1 {
		t.Errorf("a lease of another name = %+v; want rep_b's", other)
	}

	// The holder stops renewing: its lease runs out, and another takes
	// it in the next term.
	a = mustGet[store.Lease](t)(s.AcquireLease(ctx, "leader", "rep_a", time.Millisecond))
	if a.Holder != "rep_a" || a.Term != 1 {
		t.Fatalf("renewal = %+v; want rep_a still in term 1", a)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b = mustGet[store.Lease](t)(s.AcquireLease(ctx, "leader", "rep_b", hour))
		if b.Holder == "rep_b" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rep_b never took the expired lease: %+v", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if b.Term != 2 {
		t.Errorf("takeover term = %d; want 2", b.Term)
	}
	if got := mustGet[store.Lease](t)(s.AcquireLease(ctx, "leader", "rep_a", hour)); got.Holder != "rep_b" || got.Term != 2 {
		t.Errorf("the former holder's renewal = %+v; want rep_b's lease in term 2", got)
	}
	// Renewing keeps the term; releasing another's lease does nothing.
	if got := mustGet[store.Lease](t)(s.AcquireLease(ctx, "leader", "rep_b", hour)); got.Term != 2 || got.Holder != "rep_b" {
		t.Errorf("rep_b's renewal = %+v; want term 2", got)
	}
	mustDo(t, s.ReleaseLease(ctx, "leader", "rep_a"))
	if got := mustGet[store.Lease](t)(s.AcquireLease(ctx, "leader", "rep_a", hour)); got.Holder != "rep_b" {
		t.Errorf("after a release by one who does not hold it: %+v; want rep_b's", got)
	}
	mustDo(t, s.ReleaseLease(ctx, "leader", "rep_b"))
	if got := mustGet[store.Lease](t)(s.AcquireLease(ctx, "leader", "rep_a", hour)); got.Holder != "rep_a" || got.Term != 3 {
		t.Errorf("after the holder's release = %+v; want rep_a in term 3", got)
	}
}

// testReplicas: beats create a replica's row and move its SeenAt.
func testReplicas(t *testing.T, s store.Store) {
	ctx := t.Context()
	diff(t, "no replicas", []store.Replica{}, mustGet[[]store.Replica](t)(s.ListReplicas(ctx)))
	before := time.Now().Add(-time.Minute)
	mustDo(t, s.BeatReplica(ctx, store.Replica{ID: "rep_b", Addr: "127.0.0.1:2", StartedAt: at(1)}))
	mustDo(t, s.BeatReplica(ctx, store.Replica{ID: "rep_a", Addr: "127.0.0.1:1", StartedAt: at(0)}))
	reps := mustGet[[]store.Replica](t)(s.ListReplicas(ctx))
	if len(reps) != 2 || reps[0].ID != "rep_a" || reps[1].ID != "rep_b" {
		t.Fatalf("replicas = %+v; want rep_a, rep_b", reps)
	}
	if reps[0].Addr != "127.0.0.1:1" || !reps[0].StartedAt.Equal(at(0)) || reps[0].StartedAt.Location() != time.UTC {
		t.Errorf("rep_a = %+v; want its addr and start, in UTC", reps[0])
	}
	first := reps[0].SeenAt
	if first.Before(before) {
		t.Errorf("rep_a seen at %v; want about now", first)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mustDo(t, s.BeatReplica(ctx, store.Replica{ID: "rep_a", Addr: "127.0.0.1:1", StartedAt: at(0)}))
		reps = mustGet[[]store.Replica](t)(s.ListReplicas(ctx))
		if reps[0].SeenAt.After(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a beat never moved rep_a's SeenAt from %v", first)
		}
		time.Sleep(time.Millisecond)
	}
	if len(reps) != 2 {
		t.Errorf("a second beat made a row: %+v", reps)
	}
}

// testAccrueConditional: an accrual made from a meter cursor another
// replica moved meanwhile is refused whole, and usage is charged once.
func testAccrueConditional(t *testing.T, s store.Store) {
	ctx := t.Context()
	usageFixture(t, s)
	h := time.Date(2025, 3, 1, 23, 0, 0, 0, time.UTC)
	t10, t20 := h.Add(10*time.Second), h.Add(20*time.Second)
	// Two replicas both read a never-metered sandbox; the first charges.
	mustDo(t, s.AccrueUsage(ctx, []store.Accrual{
		{SandboxID: "sbx_1", TeamID: "team_a", Hour: h, CPUS: 10, CostUSD: 0.5, Until: t10},
	}))
	wantCode(t, s.AccrueUsage(ctx, []store.Accrual{
		{SandboxID: "sbx_2", TeamID: "team_a", Hour: h, CPUS: 1, CostUSD: 1, Until: t10},
		{SandboxID: "sbx_1", TeamID: "team_a", Hour: h, CPUS: 10, CostUSD: 0.5, Until: t10},
	}), api.CodeConflict)
	// The next charge continues from the cursor; a stale one from the
	// cursor before is refused.
	mustDo(t, s.AccrueUsage(ctx, []store.Accrual{
		{SandboxID: "sbx_1", TeamID: "team_a", Hour: h, CPUS: 5, CostUSD: 0.25, Until: t20, Cursor: &t10},
	}))
	wantCode(t, s.AccrueUsage(ctx, []store.Accrual{
		{SandboxID: "sbx_1", TeamID: "team_a", Hour: h, CPUS: 5, CostUSD: 0.25, Until: t20, Cursor: &t10},
	}), api.CodeConflict)
	// A meter made by a save's size alone is never metered yet.
	mustDo(t, s.SetStoredBytes(ctx, "sbx_3", 10))
	mustDo(t, s.AccrueUsage(ctx, []store.Accrual{
		{SandboxID: "sbx_3", TeamID: "team_b", Hour: h, StorageGiBH: 1, CostUSD: 1, Until: t10},
	}))

	diff(t, "team a", []api.Usage{{CPUS: 15, CostUSD: 0.75}}, mustGet[[]api.Usage](t)(s.SumUsage(ctx, store.UsageFilter{TeamID: "team_a"})))
	if sb := mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", "sbx_1")); sb.CostUSD != 0.75 {
		t.Errorf("cost_usd = %v; want 0.75, charged once", sb.CostUSD)
	}
	if m := mustGet[store.Meter](t)(s.GetMeter(ctx, "sbx_2")); m.AccruedUntil != nil {
		t.Errorf("sbx_2's meter moved with a refused batch: %v", m.AccruedUntil)
	}
	if m := mustGet[store.Meter](t)(s.GetMeter(ctx, "sbx_1")); m.AccruedUntil == nil || !m.AccruedUntil.Equal(t20) {
		t.Errorf("sbx_1's meter = %v; want %v", m.AccruedUntil, t20)
	}
}

// testSandboxOwners: the last claim of a sandbox names its owner.
func testSandboxOwners(t *testing.T, s store.Store) {
	ctx := t.Context()
	if got := mustGet[string](t)(s.SandboxOwner(ctx, "sbx_1")); got != "" {
		t.Errorf("owner before a claim = %q; want none", got)
	}
	mustDo(t, s.ClaimSandbox(ctx, "sbx_1", "rep_a"))
	mustDo(t, s.ClaimSandbox(ctx, "sbx_2", "rep_a"))
	mustDo(t, s.ClaimSandbox(ctx, "sbx_1", "rep_b"))
	for id, want := range map[string]string{"sbx_1": "rep_b", "sbx_2": "rep_a", "sbx_3": ""} {
		if got := mustGet[string](t)(s.SandboxOwner(ctx, id)); got != want {
			t.Errorf("owner of %s = %q; want %q", id, got, want)
		}
	}
}

// testPruneReplicas: a prune deletes the replicas last seen before its
// cutoff (on the store's clock) and keeps those that beat since.
func testPruneReplicas(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustDo(t, s.BeatReplica(ctx, store.Replica{ID: "rep_old", StartedAt: at(0)}))
	old := mustGet[[]store.Replica](t)(s.ListReplicas(ctx))[0].SeenAt
	var fresh store.Replica
	deadline := time.Now().Add(10 * time.Second)
	for {
		mustDo(t, s.BeatReplica(ctx, store.Replica{ID: "rep_new", StartedAt: at(1)}))
		reps := mustGet[[]store.Replica](t)(s.ListReplicas(ctx))
		if fresh = reps[0]; fresh.ID == "rep_old" {
			fresh = reps[1]
		}
		if fresh.SeenAt.After(old) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store's clock never moved past %v", old)
		}
		time.Sleep(time.Millisecond)
	}
	if n := mustGet[int64](t)(s.PruneReplicas(ctx, old)); n != 0 {
		t.Errorf("a prune before every beat deleted %d rows; want none", n)
	}
	if n := mustGet[int64](t)(s.PruneReplicas(ctx, fresh.SeenAt)); n != 1 {
		t.Errorf("pruned %d replicas; want rep_old alone", n)
	}
	reps := mustGet[[]store.Replica](t)(s.ListReplicas(ctx))
	if len(reps) != 1 || reps[0].ID != "rep_new" {
		t.Errorf("replicas after the prune = %+v; want rep_new alone", reps)
	}
}

// testPruneSandboxOwners: a prune deletes the claims of terminated,
// failed and missing sandboxes, and keeps those of live ones.
func testPruneSandboxOwners(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	states := []api.SandboxState{api.StateRunning, api.StateSleeping, api.StateTerminated, api.StateFailed, api.StateAsleep}
	for i, st := range states {
		sb := createSandbox(t, s, sandbox("team_a", i+1, "", st))
		mustDo(t, s.ClaimSandbox(ctx, sb.ID, "rep_a"))
	}
	mustDo(t, s.ClaimSandbox(ctx, "sbx_9999", "rep_a"))
	if n := mustGet[int64](t)(s.PruneSandboxOwners(ctx)); n != 3 {
		t.Errorf("pruned %d claims; want 3 (terminated, failed, missing)", n)
	}
	want := map[string]string{"sbx_0001": "rep_a", "sbx_0002": "rep_a", "sbx_0003": "", "sbx_0004": "", "sbx_0005": "rep_a", "sbx_9999": ""}
	for id, w := range want {
		if got := mustGet[string](t)(s.SandboxOwner(ctx, id)); got != w {
			t.Errorf("owner of %s after the prune = %q; want %q", id, got, w)
		}
	}
	if n := mustGet[int64](t)(s.PruneSandboxOwners(ctx)); n != 0 {
		t.Errorf("a second prune deleted %d claims; want none", n)
	}
}

// testClaimDelivery: of two dispatchers that read the same due delivery,
// one claims it; the claim holds until its time, and a claim from a read
// older than the last attempt is refused.
func testClaimDelivery(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	mustDo(t, s.CreateWebhook(ctx, webhook("team_a", "whk_all", "*")))
	_, err := s.AppendEvent(ctx, "team_a", api.Event{Type: "sandbox.running", SandboxID: "sbx_1", Time: at(2)})
	mustDo(t, err)
	due := mustGet[[]store.DueDelivery](t)(s.DueDeliveries(ctx, at(5), 10))
	if len(due) != 1 {
		t.Fatalf("due = %+v; want one", due)
	}
	d := due[0].Delivery
	if ok := mustGet[bool](t)(s.ClaimDelivery(ctx, d.ID, d.AttemptCount, at(5), at(20))); !ok {
		t.Fatal("the first claim was refused")
	}
	if ok := mustGet[bool](t)(s.ClaimDelivery(ctx, d.ID, d.AttemptCount, at(5), at(20))); ok {
		t.Fatal("a second dispatcher claimed a claimed delivery")
	}
	if got := mustGet[[]store.DueDelivery](t)(s.DueDeliveries(ctx, at(10), 10)); len(got) != 0 {
		t.Errorf("a claimed delivery is due before its claim ends: %+v", got)
	}
	mustDo(t, s.RecordAttempt(ctx, d.ID, api.DeliveryAttempt{Time: at(6), StatusCode: 500}, api.DeliveryPending, ptr(at(30))))
	// A dispatcher that read it before that attempt: refused even once due.
	if ok := mustGet[bool](t)(s.ClaimDelivery(ctx, d.ID, d.AttemptCount, at(40), at(60))); ok {
		t.Error("a claim from a stale read (attempts moved) was taken")
	}
	if ok := mustGet[bool](t)(s.ClaimDelivery(ctx, d.ID, d.AttemptCount+1, at(40), at(60))); !ok {
		t.Error("a claim from a fresh read of a due delivery was refused")
	}
	if ok := mustGet[bool](t)(s.ClaimDelivery(ctx, "dlv_999999", 0, at(40), at(60))); ok {
		t.Error("a missing delivery was claimed")
	}
}

// testNUL: a NUL in text the system writes (a sandbox's failure reason,
// an event's data) is stored as U+FFFD by every store, which PostgreSQL
// would otherwise refuse; an escaped backslash followed by the text
// u0000 is kept as it is.
func testNUL(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	sb := sandbox("team_a", 1, "", api.StateFailed)
	sb.StateReason = "start: exec \x00 failed"
	createSandbox(t, s, sb)
	want := "start: exec \uFFFD failed"
	if got := mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", sb.ID)); got.StateReason != want {
		t.Errorf("state reason = %q; want %q", got.StateReason, want)
	}
	cur := mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", sb.ID))
	cur.StateReason = "again \x00\x00"
	mustDo(t, s.UpdateSandbox(ctx, cur))
	if got := mustGet[api.Sandbox](t)(s.GetSandbox(ctx, "team_a", sb.ID)); got.StateReason != "again \uFFFD\uFFFD" {
		t.Errorf("updated state reason = %q; want NULs replaced", got.StateReason)
	}
	_, err := s.AppendEvent(ctx, "team_a", api.Event{Type: "command.output", SandboxID: sb.ID, Time: at(2),
		Data: map[string]any{"snippet": "a\x00b", "kept": `c\u0000d`, "nested": map[string]any{"x\x00": []any{"\x00"}}}})
	mustDo(t, err)
	evs := mustGet[[]api.Event](t)(s.ListEvents(ctx, store.EventFilter{TeamID: "team_a"}))
	if len(evs) != 1 {
		t.Fatalf("events = %+v; want one", evs)
	}
	diff(t, "event data", map[string]any{"snippet": "a\uFFFDb", "kept": `c\u0000d`, "nested": map[string]any{"x\uFFFD": []any{"\uFFFD"}}}, evs[0].Data)
}
