package storetest

import (
	"fmt"
	"testing"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/store"
)

func report(sandboxID, dest string, port int, decision string, count int64, first, last int, cmd string) store.Observation {
	return store.Observation{SandboxID: sandboxID, NetworkObservation: api.NetworkObservation{
		Destination: dest, Port: port, Decision: decision, Count: count,
		BytesOut: 10 * count, BytesIn: 100 * count,
		FirstSeen: at(first), LastSeen: at(last), LastCommandID: cmd,
	}}
}

// testObservations: reports add up per sandbox, destination, port and
// decision; the command of the latest report that knew one stays.
func testObservations(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createSandbox(t, s, sandbox("team_a", 1, "", api.StateRunning))
	createSandbox(t, s, sandbox("team_a", 2, "", api.StateRunning))
	a, b := "sbx_0001", "sbx_0002"
	mustDo(t, s.AddObservations(ctx, []store.Observation{
		report(a, "example.com", 443, "allowed", 2, 3, 4, "cmd_1"),
		report(a, "example.com", 443, "denied", 1, 5, 5, "cmd_2"),
		report(b, "example.com", 443, "allowed", 1, 1, 1, "cmd_9"),
	}, 100))
	mustDo(t, s.AddObservations(ctx, []store.Observation{
		report(a, "example.com", 443, "allowed", 3, 1, 2, ""),     // earlier first seen; no command known
		report(a, "10.0.0.1", 22, "denied", 1, 6, 6, ""),          // a new row without a command
		report(a, "example.com", 443, "denied", 0, 7, 7, "cmd_3"), // a command learnt later
	}, 100))
	o := func(dest string, port int, decision string, count int64, first, last int, cmd string) api.NetworkObservation {
		return report("", dest, port, decision, count, first, last, cmd).NetworkObservation
	}
	utc := func(obs []api.NetworkObservation) []api.NetworkObservation {
		for i := range obs {
			obs[i].FirstSeen, obs[i].LastSeen = obs[i].FirstSeen.UTC(), obs[i].LastSeen.UTC()
		}
		return obs
	}
	diff(t, "sandbox a", utc([]api.NetworkObservation{
		o("10.0.0.1", 22, "denied", 1, 6, 6, ""),
		o("example.com", 443, "allowed", 5, 1, 4, "cmd_1"),
		o("example.com", 443, "denied", 1, 5, 7, "cmd_3"),
	}), mustGet[[]api.NetworkObservation](t)(s.ListObservations(ctx, a)))
	diff(t, "sandbox b", utc([]api.NetworkObservation{o("example.com", 443, "allowed", 1, 1, 1, "cmd_9")}),
		mustGet[[]api.NetworkObservation](t)(s.ListObservations(ctx, b)))
	diff(t, "no observations", []api.NetworkObservation{}, mustGet[[]api.NetworkObservation](t)(s.ListObservations(ctx, "sbx_none")))

	// A node limit's denial of the same destination is a row of its own.
	limit := report(b, "example.com", 443, "denied", 2, 3, 3, "")
	limit.Reason = "connection_limit"
	mustDo(t, s.AddObservations(ctx, []store.Observation{limit, limit}, 100))
	if got := mustGet[[]api.NetworkObservation](t)(s.ListObservations(ctx, b)); len(got) != 2 || got[0].Reason != "" || got[1].Reason != "connection_limit" || got[1].Count != 4 {
		t.Errorf("rows with a reason: %+v", got)
	}

	// A report of an unknown sandbox writes nothing of its batch.
	err := s.AddObservations(ctx, []store.Observation{
		report(b, "new.example", 80, "allowed", 1, 1, 1, ""),
		report("sbx_none", "example.com", 443, "allowed", 1, 1, 1, ""),
	}, 100)
	wantCode(t, err, api.CodeNotFound)
	if got := mustGet[[]api.NetworkObservation](t)(s.ListObservations(ctx, b)); len(got) != 2 {
		t.Errorf("a refused batch wrote %v", got)
	}
	mustDo(t, s.AddObservations(ctx, nil, 100))

	// Injected requests add up; the last status stays until a report
	// that has one.
	inj := func(n int64, status int) store.Observation {
		r := report(b, "api.inject.test", 443, "allowed", n, 8, 8, "")
		r.Injected, r.LastStatus = n, status
		return r
	}
	mustDo(t, s.AddObservations(ctx, []store.Observation{inj(2, 200)}, 100))
	mustDo(t, s.AddObservations(ctx, []store.Observation{inj(1, 502), inj(0, 0)}, 100))
	for _, got := range mustGet[[]api.NetworkObservation](t)(s.ListObservations(ctx, b)) {
		if got.Destination == "api.inject.test" && (got.Injected != 3 || got.LastStatus != 502) {
			t.Errorf("injected observation %+v, want 3 injected, last status 502", got)
		}
	}
}

// testObservationBound: past the bound, new destinations go to "other",
// while known ones keep adding up.
func testObservationBound(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createSandbox(t, s, sandbox("team_a", 1, "", api.StateRunning))
	createSandbox(t, s, sandbox("team_a", 2, "", api.StateRunning))
	a, b := "sbx_0001", "sbx_0002"
	var first []store.Observation
	for i := range 3 {
		first = append(first, report(a, fmt.Sprintf("h%d.example", i), 443, "allowed", 1, i, i, ""))
	}
	first = append(first, report(b, "b.example", 443, "allowed", 1, 1, 1, "")) // another sandbox's rows do not count
	mustDo(t, s.AddObservations(ctx, first, 4))
	mustDo(t, s.AddObservations(ctx, []store.Observation{
		report(a, "h3.example", 443, "allowed", 1, 3, 3, ""), // the fourth row
		report(a, "h4.example", 443, "allowed", 1, 4, 4, ""), // past the bound
		report(a, "h5.example", 80, "denied", 2, 5, 5, "cmd_1"),
		report(a, "h0.example", 443, "allowed", 1, 6, 6, ""), // known: still its own
	}, 4))
	mustDo(t, s.AddObservations(ctx, []store.Observation{report(a, "h6.example", 443, "allowed", 1, 7, 7, "")}, 4))
	got := mustGet[[]api.NetworkObservation](t)(s.ListObservations(ctx, a))
	var keys []string
	for _, o := range got {
		keys = append(keys, fmt.Sprintf("%s:%d/%s=%d", o.Destination, o.Port, o.Decision, o.Count))
	}
	diff(t, "rows", []string{
		"h0.example:443/allowed=2", "h1.example:443/allowed=1", "h2.example:443/allowed=1", "h3.example:443/allowed=1",
		"other:0/allowed=2", "other:0/denied=2",
	}, keys)
	if o := got[5]; o.LastCommandID != "cmd_1" || !o.FirstSeen.Equal(at(5)) {
		t.Errorf("other/denied = %+v", o)
	}
}

// testObservationExpiry: rows go by their last_seen.
func testObservationExpiry(t *testing.T, s store.Store) {
	ctx := t.Context()
	createTeam(t, s, "team_a")
	createSandbox(t, s, sandbox("team_a", 1, "", api.StateTerminated))
	a := "sbx_0001"
	mustDo(t, s.AddObservations(ctx, []store.Observation{
		report(a, "old.example", 443, "allowed", 1, 0, 1, ""),
		report(a, "new.example", 443, "allowed", 1, 0, 3, ""),
	}, 100))
	n, err := s.DeleteObservationsBefore(ctx, at(2))
	mustDo(t, err)
	if n != 1 {
		t.Fatalf("dropped %d observations, want 1", n)
	}
	got := mustGet[[]api.NetworkObservation](t)(s.ListObservations(ctx, a))
	if len(got) != 1 || got[0].Destination != "new.example" {
		t.Fatalf("after expiry: %+v", got)
	}
}
