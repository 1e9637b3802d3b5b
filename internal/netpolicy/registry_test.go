package netpolicy

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for RegistryConfig.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestDeniedEvery(t *testing.T) {
	type step struct {
		advance time.Duration
		dest    string
		port    int
	}
	tests := []struct {
		name  string
		every time.Duration
		steps []step
		want  int // OnDenied calls
	}{
		{name: "default 10s", steps: []step{{0, "a.test", 443}, {time.Second, "a.test", 443}, {9 * time.Second, "a.test", 443}}, want: 2},
		{name: "within 10s once", steps: []step{{0, "a.test", 443}, {5 * time.Second, "a.test", 443}, {4 * time.Second, "a.test", 443}}, want: 1},
		{name: "per destination", steps: []step{{0, "a.test", 443}, {0, "b.test", 443}, {0, "a.test", 80}}, want: 3},
		{name: "configured", every: time.Minute, steps: []step{{0, "a.test", 443}, {30 * time.Second, "a.test", 443}, {30 * time.Second, "a.test", 443}}, want: 2},
		{name: "negative: every denial", every: -1, steps: []step{{0, "a.test", 443}, {0, "a.test", 443}}, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			var calls []Observation
			reg := NewRegistry(RegistryConfig{
				DeniedEvery:     tt.every,
				Now:             clock.Now,
				DeniedPerSecond: -1,
				OnDenied: func(id string, d Denial) {
					if id != "sb1" {
						t.Errorf("OnDenied for %q", id)
					}
					calls = append(calls, d.Observation)
				},
			}, nil)
			reg.Add("sb1", netip.MustParseAddr("10.9.0.2"), Policy{}, Policy{})
			p, _ := reg.peer(netip.MustParseAddr("10.9.0.2"))
			for _, s := range tt.steps {
				clock.Advance(s.advance)
				reg.observe(p, s.dest, s.port, Denied)
			}
			if len(calls) != tt.want {
				t.Fatalf("OnDenied called %d times, want %d: %+v", len(calls), tt.want, calls)
			}
			// Every denial is observed, whether or not it was reported.
			var total int64
			for _, o := range reg.Observations("sb1") {
				total += o.Count
			}
			if total != int64(len(tt.steps)) {
				t.Errorf("observed %d denials, want %d", total, len(tt.steps))
			}
		})
	}
}

func TestRegistryLifecycle(t *testing.T) {
	clock := newFakeClock()
	reg := NewRegistry(RegistryConfig{Now: clock.Now, MaxObservations: 2, MaxRemembered: 2}, nil)
	a := netip.MustParseAddr("10.9.0.2")
	reg.Add("sb1", a, MustParse("a.test"), MustParse("b.test"))
	p, ok := reg.peer(a)
	if !ok || !p.policy.AllowsName("a.test", 1) || p.setup {
		t.Fatalf("peer = %+v, %v", p, ok)
	}
	reg.UseSetup("sb1", true)
	if p, _ := reg.peer(a); !p.setup || !p.policy.AllowsName("b.test", 1) || p.policy.AllowsName("a.test", 1) {
		t.Fatalf("setup peer = %+v", p)
	}
	reg.UseSetup("sb1", false)
	reg.SetPolicy("sb1", MustParse("c.test"), Policy{})
	if pol, setup, ok := reg.Policy("sb1"); !ok || setup || !pol.AllowsName("c.test", 1) {
		t.Fatalf("Policy = %v, %v, %v", pol, setup, ok)
	}

	// Bounded observations: past the bound, new destinations are "other".
	for _, d := range []string{"x", "y", "z", "w"} {
		reg.observe(p, d, 1, Denied)
	}
	obs := reg.Observations("sb1")
	if len(obs) != 3 || obs[0].Destination != "other" || obs[0].Count != 2 {
		t.Errorf("observations = %+v, want x, y and other×2", obs)
	}

	// Bounded memory of given addresses: the oldest pair goes.
	ip := netip.MustParseAddr("198.20.0.1")
	reg.remember(p.sb, "one.test", []netip.Addr{ip})
	clock.Advance(time.Second)
	reg.remember(p.sb, "two.test", []netip.Addr{ip})
	clock.Advance(time.Second)
	reg.remember(p.sb, "three.test", []netip.Addr{ip})
	if reg.gave(p.sb, ip, "one.test") || !reg.gave(p.sb, ip, "two.test") || !reg.gave(p.sb, ip, "THREE.test.") {
		t.Errorf("names for %s = %v, want two.test and three.test", ip, reg.namesFor(p.sb, ip))
	}

	// Moving a sandbox keeps what it did.
	b := netip.MustParseAddr("10.9.0.3")
	reg.Add("sb1", b, MustParse("a.test"), Policy{})
	if _, ok := reg.peer(a); ok {
		t.Error("old address still known")
	}
	if p2, ok := reg.peer(b); !ok || p2.sb != p.sb || len(reg.Observations("sb1")) != 3 {
		t.Error("re-Add lost the sandbox's state")
	}

	reg.Remove("sb1")
	if _, ok := reg.peer(b); ok {
		t.Error("removed sandbox still known by address")
	}
	if obs := reg.Observations("sb1"); len(obs) != 0 {
		t.Errorf("removed sandbox has observations %+v", obs)
	}
	reg.Add("sb1", b, Policy{}, Policy{})
	p3, _ := reg.peer(b)
	if reg.gave(p3.sb, ip, "two.test") {
		t.Error("re-added sandbox remembers addresses from before Remove")
	}
	// Unknown sandboxes are ignored.
	reg.SetPolicy("nope", Policy{}, Policy{})
	reg.UseSetup("nope", true)
	reg.Remove("nope")
}

// TestDeniedPerSecond: a sandbox's reports of denials are bounded per
// second, all destinations together; those held back are counted into the
// next report, which Run's flush makes once the rate allows if no denial
// does first. Every denial is in the observations, and every one is either
// reported or counted as suppressed in a report.
func TestDeniedPerSecond(t *testing.T) {
	clock := newFakeClock()
	var got []Denial
	reg := NewRegistry(RegistryConfig{
		DeniedEvery:     -1, // the per-destination bound is another test's
		DeniedPerSecond: 2,
		Now:             clock.Now,
		OnDenied:        func(id string, d Denial) { got = append(got, d) },
	}, nil)
	a := netip.MustParseAddr("10.9.0.2")
	reg.Add("sb1", a, Policy{}, Policy{})
	p, _ := reg.peer(a)
	deny := func(dests ...string) {
		for _, d := range dests {
			reg.observe(p, d, 443, Denied)
		}
	}
	type report struct {
		dest       string
		suppressed int64
	}
	check := func(step string, want ...report) {
		t.Helper()
		var have []report
		for _, d := range got {
			have = append(have, report{d.Destination, d.Suppressed})
		}
		got = nil
		if len(have) != len(want) {
			t.Fatalf("%s: reports %+v, want %+v", step, have, want)
		}
		for i := range want {
			if have[i] != want[i] {
				t.Fatalf("%s: reports %+v, want %+v", step, have, want)
			}
		}
	}

	deny("a", "b", "c", "d", "e")
	check("a burst of five", report{"a", 0}, report{"b", 0})
	reg.flush()
	check("flush without a token")
	clock.Advance(500 * time.Millisecond)
	reg.flush()
	check("flush with a token: the last held back, and the others", report{"e", 2})
	reg.flush()
	check("nothing held back")

	clock.Advance(time.Second)
	deny("f", "g", "h", "i")
	check("a second burst", report{"f", 0}, report{"g", 0})
	clock.Advance(500 * time.Millisecond)
	deny("j")
	check("a denial carries the count", report{"j", 2})
	reg.flush()
	check("nothing left to flush")

	// A removed sandbox's held-back denials are forgotten with it.
	deny("k", "l", "m")
	got = nil
	reg.Remove("sb1")
	clock.Advance(time.Hour)
	reg.flush()
	check("removed")
}

// TestLimitDenialsApart: a denial by a limit is observed apart from the
// policy's denials of the same destination, with its reason.
func TestLimitDenialsApart(t *testing.T) {
	reg := NewRegistry(RegistryConfig{}, nil)
	a := netip.MustParseAddr("10.9.0.2")
	reg.Add("sb1", a, Policy{}, Policy{})
	p, _ := reg.peer(a)
	reg.observe(p, "x.test", 443, Denied)
	reg.refuse(p.sb, "x.test", 443, ReasonConnectionLimit)
	reg.refuse(p.sb, "x.test", 443, ReasonConnectionLimit)
	obs := reg.Observations("sb1")
	if len(obs) != 2 || obs[0].Reason != "" || obs[0].Count != 1 || obs[1].Reason != ReasonConnectionLimit || obs[1].Count != 2 {
		t.Errorf("observations = %+v, want the policy's denial and two connection_limit ones apart", obs)
	}
}

// TestAdmitSlots: slots are taken up to the bound, per sandbox and per
// kind, and given back; a sandbox removed while it holds slots takes them
// with it, and one added again starts from none.
func TestAdmitSlots(t *testing.T) {
	reg := NewRegistry(RegistryConfig{}, nil)
	a, b := netip.MustParseAddr("10.9.0.2"), netip.MustParseAddr("10.9.0.6")
	reg.Add("sb1", a, Policy{}, Policy{})
	reg.Add("sb2", b, Policy{}, Policy{})
	var held []peer
	for i := range 3 {
		p, known, ok := reg.admit(a, slotConn, 2)
		if !known || ok != (i < 2) {
			t.Fatalf("admit %d: known %v ok %v", i, known, ok)
		}
		if ok {
			held = append(held, p)
		}
	}
	if _, _, ok := reg.admit(b, slotConn, 2); !ok {
		t.Error("sb2 refused for sb1's connections")
	}
	if _, _, ok := reg.admit(a, slotQuery, 2); !ok {
		t.Error("sb1's query refused for its connections")
	}
	if _, known, _ := reg.admit(netip.MustParseAddr("10.9.0.10"), slotConn, 2); known {
		t.Error("an unknown address admitted")
	}
	if _, _, ok := reg.admit(a, slotConn, -1); !ok {
		t.Error("no bound refused")
	}
	reg.release(held[0].sb, slotConn)
	if c, q := reg.held("sb1"); c != 2 || q != 1 {
		t.Errorf("held = %d, %d; want 2, 1", c, q)
	}
	reg.Remove("sb1")
	reg.Add("sb1", a, Policy{}, Policy{})
	reg.release(held[1].sb, slotConn) // a connection of before ends
	if c, q := reg.held("sb1"); c != 0 || q != 0 {
		t.Errorf("re-added sandbox holds %d, %d", c, q)
	}
}
