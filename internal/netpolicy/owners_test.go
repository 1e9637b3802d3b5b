package netpolicy

import (
	"context"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// fakeAgent plays the sandbox's agent for owner lookups: it names the
// command registered for a client's local port.
type fakeAgent struct {
	mu       sync.Mutex
	byPort   map[uint16]string
	asked    []Socket
	calls    int
	maxBatch int
	gate     chan struct{} // when not nil, calls wait for it to close
}

func (a *fakeAgent) owners(ctx context.Context, id string, socks []Socket) ([]string, error) {
	a.mu.Lock()
	gate := a.gate
	a.calls++
	a.maxBatch = max(a.maxBatch, len(socks))
	a.asked = append(a.asked, socks...)
	a.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, len(socks))
	for i, s := range socks {
		if id == sandboxID {
			out[i] = a.byPort[s.Local.Port()]
		}
	}
	return out, nil
}

func (a *fakeAgent) set(port uint16, cmd string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.byPort[port] = cmd
}

// ownerHarness is a harness whose registry asks a fake agent who made each
// connection, with the lookups running.
func ownerHarness(t *testing.T, a *fakeAgent, rc RegistryConfig, allow ...string) (*harness, *testServers) {
	t.Helper()
	s := startServers(t)
	rc.Owners = a.owners
	h := newHarness(t, harnessConfig{Routes: s.routes(), Registry: rc}, MustParse(allow...), Policy{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { h.reg.RunOwners(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	for {
		h.reg.owners.mu.Lock()
		running := h.reg.owners.running
		h.reg.owners.mu.Unlock()
		if running {
			return h, s
		}
		time.Sleep(time.Millisecond)
	}
}

// echo sends a line through c and reads it back: the connection was
// allowed and spliced.
func echo(t *testing.T, c io.ReadWriter) {
	t.Helper()
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("echo: %q %v", buf, err)
	}
}

// TestOwnerNamedOnObservations: the command the agent names for a
// connection's socket is the observation's last_command_id, allowed or
// denied, and the denial's event names it too.
func TestOwnerNamedOnObservations(t *testing.T) {
	a := &fakeAgent{byPort: map[uint16]string{}}
	h, _ := ownerHarness(t, a, RegistryConfig{}, "echo.example.test:7")
	h.lookup(t, "echo.example.test")

	c := h.dial(t, netip.AddrPortFrom(echoAddr, 7))
	a.set(addrPort(c.LocalAddr()).Port(), "cmd_allowed")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	echo(t, c)
	h.observation(t, "echo.example.test", 7, Allowed, func(o Observation) bool { return o.LastCommandID == "cmd_allowed" })

	d := h.dial(t, netip.AddrPortFrom(otherAddr, 7))
	a.set(addrPort(d.LocalAddr()).Port(), "cmd_denied")
	d.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := d.Read(make([]byte, 1)); err == nil {
		t.Fatal("denied connection answered")
	}
	// The denial waited for the lookup: its observation and its event
	// name the command at once.
	if o := h.observation(t, "198.20.0.99", 7, Denied, nil); o.LastCommandID != "cmd_denied" {
		t.Errorf("denied observation names %q", o.LastCommandID)
	}
	if ev := h.deniedEvents(); len(ev) != 1 || ev[0].LastCommandID != "cmd_denied" {
		t.Errorf("denied events %+v", ev)
	}

	// The agent was asked about the sandbox's side of each connection:
	// its source and the destination it dialled.
	a.mu.Lock()
	defer a.mu.Unlock()
	want := map[Socket]bool{
		{Proto: "tcp", Local: addrPort(c.LocalAddr()), Remote: netip.AddrPortFrom(echoAddr, 7)}:  true,
		{Proto: "tcp", Local: addrPort(d.LocalAddr()), Remote: netip.AddrPortFrom(otherAddr, 7)}: true,
	}
	for _, s := range a.asked {
		delete(want, s)
	}
	if len(want) != 0 {
		t.Errorf("agent asked %+v; never for %+v", a.asked, want)
	}
}

// TestOwnerLookupOffThePath: an allowed connection is spliced while its
// lookup hangs; a denial waits for it only OwnerWait; the command found
// later still lands on the observation.
func TestOwnerLookupOffThePath(t *testing.T) {
	gate := make(chan struct{})
	a := &fakeAgent{byPort: map[uint16]string{}, gate: gate}
	h, _ := ownerHarness(t, a, RegistryConfig{OwnerWait: 200 * time.Millisecond, OwnerTimeout: time.Minute}, "echo.example.test:7")
	h.lookup(t, "echo.example.test")

	c := h.dial(t, netip.AddrPortFrom(echoAddr, 7))
	a.set(addrPort(c.LocalAddr()).Port(), "cmd_late")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	echo(t, c) // the lookup is still held at the gate

	d := h.dial(t, netip.AddrPortFrom(otherAddr, 7))
	d.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := d.Read(make([]byte, 1)); err == nil {
		t.Fatal("denied connection answered")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the denial took %v with its lookup hung; want about OwnerWait", took)
	}
	if o := h.observation(t, "echo.example.test", 7, Allowed, nil); o.LastCommandID != "" {
		t.Errorf("command %q before the agent answered", o.LastCommandID)
	}
	close(gate)
	h.observation(t, "echo.example.test", 7, Allowed, func(o Observation) bool { return o.LastCommandID == "cmd_late" })
}

// TestOwnerLookupsBatched: connections arriving while a lookup is in
// flight wait for the next call, which takes them all.
func TestOwnerLookupsBatched(t *testing.T) {
	gate := make(chan struct{})
	a := &fakeAgent{byPort: map[uint16]string{}, gate: gate}
	h, _ := ownerHarness(t, a, RegistryConfig{OwnerTimeout: time.Minute}, "echo.example.test:7")
	h.lookup(t, "echo.example.test")
	const n = 20
	for i := range n {
		c := h.dial(t, netip.AddrPortFrom(echoAddr, 7))
		a.set(addrPort(c.LocalAddr()).Port(), "cmd_batch")
		c.SetDeadline(time.Now().Add(5 * time.Second))
		echo(t, c)
		if i == 0 {
			// The first call is in flight (held at the gate) before the
			// others arrive.
			for {
				a.mu.Lock()
				calls := a.calls
				a.mu.Unlock()
				if calls == 1 {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	close(gate)
	h.observation(t, "echo.example.test", 7, Allowed, func(o Observation) bool { return o.Count == n && o.LastCommandID == "cmd_batch" })
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.mu.Lock()
		calls, asked, maxBatch := a.calls, len(a.asked), a.maxBatch
		a.mu.Unlock()
		if asked == n {
			if calls != 2 || maxBatch != n-1 {
				t.Errorf("%d calls, largest %d sockets; want 2 calls, the second with %d", calls, maxBatch, n-1)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("asked about %d of %d connections", asked, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDrainReports: Drain hands over what was counted since the last one,
// removed sandboxes' included, and Pending shows what it has not taken.
func TestDrainReports(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	reg := NewRegistry(RegistryConfig{Now: clock}, nil)
	addr := netip.MustParseAddr("10.9.0.2")
	reg.Add("sb1", addr, MustParse("a.test"), Policy{})
	p, _ := reg.peer(addr)
	k := reg.observe(p, "a.test", 443, Allowed)
	now = now.Add(time.Second)
	reg.addBytes(p.sb, k, 10, 20)
	reg.observe(p, "b.test", 80, Denied)
	if got := reg.Pending("sb1"); len(got) != 2 {
		t.Fatalf("pending %+v", got)
	}
	r := reg.Drain()
	want := []Report{
		{"sb1", Observation{Destination: "a.test", Port: 443, Decision: Allowed, Count: 1, BytesOut: 10, BytesIn: 20, FirstSeen: now.Add(-time.Second), LastSeen: now}},
		{"sb1", Observation{Destination: "b.test", Port: 80, Decision: Denied, Count: 1, FirstSeen: now, LastSeen: now}},
	}
	if len(r) != 2 || r[0] != want[0] || r[1] != want[1] {
		t.Fatalf("drained %+v\nwant %+v", r, want)
	}
	if r := reg.Drain(); len(r) != 0 {
		t.Errorf("drained again: %+v", r)
	}
	// The totals stay.
	if obs := reg.Observations("sb1"); len(obs) != 2 || obs[0].Count != 1 {
		t.Errorf("totals %+v", obs)
	}

	// Bytes of a connection that outlives Remove are drained too.
	now = now.Add(time.Second)
	reg.observe(p, "a.test", 443, Allowed)
	reg.Remove("sb1")
	reg.addBytes(p.sb, k, 5, 0)
	if got := reg.Pending("sb1"); len(got) != 1 || got[0].Count != 1 || got[0].BytesOut != 5 {
		t.Errorf("pending after remove %+v", got)
	}
	if r := reg.Drain(); len(r) != 1 || r[0].Count != 1 || r[0].BytesOut != 5 {
		t.Errorf("drained after remove %+v", r)
	}
	reg.addBytes(p.sb, k, 7, 0)
	if r := reg.Drain(); len(r) != 1 || r[0].Count != 0 || r[0].BytesOut != 7 {
		t.Errorf("drained after remove, again %+v", r)
	}
	if r := reg.Drain(); len(r) != 0 {
		t.Errorf("removed sandbox drained again: %+v", r)
	}
}

// TestOwnerLaterConnectionWins: a lookup answered late does not replace
// the command of a later connection, and a command learnt after a Drain is
// reported alone.
func TestOwnerLaterConnectionWins(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	reg := NewRegistry(RegistryConfig{Now: func() time.Time { return now }}, nil)
	addr := netip.MustParseAddr("10.9.0.2")
	reg.Add("sb1", addr, MustParse("a.test"), Policy{})
	conn := func(seq uint64) peer {
		p, _ := reg.peer(addr)
		p.conn = &conn{sb: p.sb, seq: seq, done: make(chan struct{})}
		return p
	}
	p1, p2 := conn(1), conn(2)
	reg.observe(p1, "a.test", 443, Allowed)
	reg.observe(p2, "a.test", 443, Allowed)
	reg.Drain()
	reg.resolve(p2.conn, "cmd_2")
	reg.resolve(p1.conn, "cmd_1")
	if o := reg.Observations("sb1"); o[0].LastCommandID != "cmd_2" {
		t.Errorf("command %q, want the later connection's", o[0].LastCommandID)
	}
	r := reg.Drain()
	if len(r) != 1 || r[0].Count != 0 || r[0].LastCommandID != "cmd_2" || r[0].FirstSeen.IsZero() {
		t.Errorf("drained %+v", r)
	}
}
