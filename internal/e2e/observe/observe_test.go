package observe

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// TestLastCommandID: each observation names the command whose process
// made its latest connection: allowed (as the default user), denied over
// HTTP (as root), denied raw TCP, a denied DNS query, a later command's
// connection, and a background process of a command that has ended. The
// network.denied events name their commands too. Processes that try to
// mislead the lookup get their own command or none.
func TestLastCommandID(t *testing.T) {
	s, host, sb := obsSandbox(t)
	addr := host.Addr.String()

	allowed := run(t, s, sb.ID, curl+"http://web.test/slow", 0)
	waitObservation(t, s, sb.ID, "web.test:80 allowed", func(o api.NetworkObservation) bool { return o.LastCommandID == allowed })

	// Denials wait for their lookup before they answer: the command is
	// named as soon as the command has ended.
	deniedHTTP := run(t, s, sb.ID, "curl -s --max-time 10 http://"+addr+":8080/", 0, e2etest.AsRoot)
	deniedRaw := run(t, s, sb.ID, fmt.Sprintf(`python3 -c 'import socket; s=socket.create_connection(("%s", 7), 5); s.sendall(b"x"); s.recv(10)'`, addr), 1)
	deniedDNS := run(t, s, sb.ID, "getent hosts other.test", 2)
	obs := observations(t, s, sb.ID)
	for key, want := range map[string]string{
		addr + ":8080 denied":  deniedHTTP,
		addr + ":7 denied":     deniedRaw,
		"other.test:53 denied": deniedDNS, // A and AAAA: one query or two
	} {
		if o := obs[key]; o.Count < 1 || o.LastCommandID != want {
			t.Errorf("%s: %+v; want it counted, naming command %s", key, o, want)
		}
	}
	events := map[string]string{}
	for _, e := range deniedEvents(t, s, sb.ID) {
		events[fmt.Sprintf("%v:%v", e.Data["destination"], e.Data["port"])] = e.CommandID
	}
	for dest, want := range map[string]string{addr + ":8080": deniedHTTP, addr + ":7": deniedRaw, "other.test:53": deniedDNS} {
		if events[dest] != want {
			t.Errorf("network.denied for %s names %q, want %s (all: %v)", dest, events[dest], want, events)
		}
	}

	// Hostile: a process that names itself like the fields the agent reads
	// in /proc/PID/stat is still found; a daemon that left its command's
	// group, session and parentage is nobody's, never another command's.
	named := run(t, s, sb.ID, fmt.Sprintf(`python3 -c 'import ctypes, socket; ctypes.CDLL(None).prctl(15, b") R 1 1 1 1", 0, 0, 0); socket.create_connection(("%s", 9), 5).recv(1)'`, addr), 1)
	if o := observations(t, s, sb.ID)[addr+":9 denied"]; o.LastCommandID != named {
		t.Errorf("self-named process: %+v; want command %s", o, named)
	}
	run(t, s, sb.ID, "setsid -f sh -c 'sleep 0.3; curl -s --max-time 5 http://"+addr+":8081/' >/dev/null 2>&1", 0)
	if o := waitObservation(t, s, sb.ID, addr+":8081 denied", func(api.NetworkObservation) bool { return true }); o.LastCommandID != "" {
		t.Errorf("daemon's connection names %q", o.LastCommandID)
	}

	// A later command's connection takes over.
	again := run(t, s, sb.ID, curl+"http://web.test/slow", 0)
	waitObservation(t, s, sb.ID, "web.test:80 allowed", func(o api.NetworkObservation) bool { return o.Count == 2 && o.LastCommandID == again })

	// A process a command left behind still counts as that command's.
	bg := run(t, s, sb.ID, "(sleep 0.5; "+curl+"http://web.test/slow) >/dev/null 2>&1 &", 0)
	waitObservation(t, s, sb.ID, "web.test:80 allowed", func(o api.NetworkObservation) bool { return o.Count == 3 && o.LastCommandID == bg })
}

// storedRow reads one observation from the server's database file.
func storedRow(t testing.TB, s *e2etest.Server, sandboxID string, o api.NetworkObservation) (api.NetworkObservation, bool) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(s.DataDir, "cove.db")+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got := o
	var first, last string
	err = db.QueryRowContext(t.Context(), `SELECT count, bytes_out, bytes_in, first_seen, last_seen, last_command_id
		FROM network_observations WHERE sandbox_id = ? AND destination = ? AND port = ? AND decision = ?`,
		sandboxID, o.Destination, o.Port, o.Decision).Scan(&got.Count, &got.BytesOut, &got.BytesIn, &first, &last, &got.LastCommandID)
	if err == sql.ErrNoRows {
		return got, false
	}
	if err != nil {
		t.Fatal(err)
	}
	got.FirstSeen, _ = time.Parse(time.RFC3339Nano, first)
	got.LastSeen, _ = time.Parse(time.RFC3339Nano, last)
	return got, true
}

func same(a, b api.NetworkObservation) bool {
	return a.Destination == b.Destination && a.Port == b.Port && a.Decision == b.Decision && a.Count == b.Count &&
		a.BytesOut == b.BytesOut && a.BytesIn == b.BytesIn && a.FirstSeen.Equal(b.FirstSeen) && a.LastSeen.Equal(b.LastSeen) &&
		a.LastCommandID == b.LastCommandID
}

// waitAllStored waits until the database holds every observation the API
// shows, as it shows it (the server stores them every second).
func waitAllStored(t testing.TB, s *e2etest.Server, sandboxID string) map[string]api.NetworkObservation {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		obs := observations(t, s, sandboxID)
		all := true
		for _, o := range obs {
			if got, ok := storedRow(t, s, sandboxID, o); !ok || !same(got, o) {
				all = false
			}
		}
		if all {
			return obs
		}
		if time.Now().After(deadline) {
			t.Fatalf("observations not stored: %+v", obs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func checkSame(t *testing.T, when string, want, got map[string]api.NetworkObservation) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok || !same(w, g) {
			t.Errorf("%s: %s = %+v, want %+v", when, k, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d observations, want %d: %+v", when, len(got), len(want), got)
	}
}

// setup makes one allowed and one denied connection and waits until both
// name their commands.
func setup(t testing.TB, s *e2etest.Server, sandboxID, addr string) {
	t.Helper()
	allowed := run(t, s, sandboxID, curl+"http://web.test/slow", 0)
	denied := run(t, s, sandboxID, "curl -s --max-time 10 http://"+addr+":8080/", 0)
	waitObservation(t, s, sandboxID, "web.test:80 allowed", func(o api.NetworkObservation) bool { return o.LastCommandID == allowed })
	waitObservation(t, s, sandboxID, addr+":8080 denied", func(o api.NetworkObservation) bool { return o.LastCommandID == denied })
}

// TestObservationsSurviveKill9: observations in the store are the same
// after `cove serve` is killed with SIGKILL and started again, and the
// reattached sandbox's new connections add to them.
func TestObservationsSurviveKill9(t *testing.T) {
	s, host, sb := obsSandbox(t)
	setup(t, s, sb.ID, host.Addr.String())
	before := waitAllStored(t, s, sb.ID)

	s.Stop(syscall.SIGKILL)
	s.Start()
	checkSame(t, "after kill -9 and restart", before, observations(t, s, sb.ID))

	cmd := run(t, s, sb.ID, curl+"http://web.test/slow", 0)
	o := waitObservation(t, s, sb.ID, "web.test:80 allowed", func(o api.NetworkObservation) bool { return o.LastCommandID == cmd })
	if b := before["web.test:80 allowed"]; o.Count != b.Count+1 || !o.FirstSeen.Equal(b.FirstSeen) || o.BytesIn <= b.BytesIn {
		t.Errorf("after a connection since the restart: %+v; before %+v", o, b)
	}
}

// TestObservationsSurviveSleepWakeTerminate: a sleeping, woken and then
// terminated sandbox keeps its observations.
func TestObservationsSurviveSleepWakeTerminate(t *testing.T) {
	s, host, sb := obsSandbox(t)
	ctx := t.Context()
	setup(t, s, sb.ID, host.Addr.String())
	before := observations(t, s, sb.ID)

	if _, err := s.Admin.SleepSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateAsleep, 2*time.Minute); err != nil || got.State != api.StateAsleep {
		t.Fatalf("sleep: %s %v", got.State, err)
	}
	checkSame(t, "asleep", before, observations(t, s, sb.ID))
	checkSame(t, "asleep, stored", before, waitAllStored(t, s, sb.ID))

	if _, err := s.Admin.WakeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateRunning, 2*time.Minute); err != nil || got.State != api.StateRunning {
		t.Fatalf("wake: %s %v", got.State, err)
	}
	checkSame(t, "awake", before, observations(t, s, sb.ID))
	cmd := run(t, s, sb.ID, curl+"http://web.test/slow", 0)
	o := waitObservation(t, s, sb.ID, "web.test:80 allowed", func(o api.NetworkObservation) bool { return o.LastCommandID == cmd })
	if b := before["web.test:80 allowed"]; o.Count != b.Count+1 {
		t.Errorf("after a connection since the wake: %+v; before %+v", o, b)
	}
	after := observations(t, s, sb.ID)

	if _, err := s.Admin.TerminateSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Admin.WaitSandbox(ctx, sb.ID, api.StateTerminated, 2*time.Minute); err != nil || got.State != api.StateTerminated {
		t.Fatalf("terminate: %s %v", got.State, err)
	}
	checkSame(t, "terminated", after, waitAllStored(t, s, sb.ID))
}

// TestObservationsPerSandbox: two sandboxes of two teams reach the same
// destination at once; each sees only its own connection, naming its own
// command, and neither team can read the other's.
func TestObservationsPerSandbox(t *testing.T) {
	s, _, a := obsSandbox(t)
	other := s.NewTeam("other-team")
	b := e2etest.Create(t, other, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"web.test:80"}}})
	type result struct {
		res api.CommandResult
		err error
	}
	resA := make(chan result, 1)
	go func() {
		res, err := s.Admin.ExecWait(t.Context(), a.ID, api.CreateCommandRequest{Command: curl + "http://web.test/slow"})
		resA <- result{res, err}
	}()
	resB := e2etest.Sh(t, other, b.ID, curl+"http://web.test/slow", e2etest.WithTimeout(30))
	ra := <-resA
	if ra.err != nil || e2etest.ExitCode(ra.res) != 0 || e2etest.ExitCode(resB) != 0 {
		t.Fatalf("sandbox a: %+v %v; sandbox b: %+v", ra.res, ra.err, resB)
	}
	cmdA := ra.res.Command.ID
	oa := waitObservation(t, s, a.ID, "web.test:80 allowed", func(o api.NetworkObservation) bool { return o.LastCommandID != "" })
	vb, err := other.Network(t.Context(), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if oa.Count != 1 || oa.LastCommandID != cmdA {
		t.Errorf("sandbox a: %+v; want one connection of %s", oa, cmdA)
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(vb.Observations) != 1 || vb.Observations[0].LastCommandID == "" {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox b: %+v", vb.Observations)
		}
		time.Sleep(50 * time.Millisecond)
		if vb, err = other.Network(t.Context(), b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if ob := vb.Observations[0]; ob.Count != 1 || ob.LastCommandID != resB.Command.ID {
		t.Errorf("sandbox b: %+v; want one connection of %s", ob, resB.Command.ID)
	}
	if _, err := other.Network(t.Context(), a.ID); api.ErrorCode(err) != api.CodeNotFound {
		t.Errorf("team b reads sandbox a's observations: %v", err)
	}
}
