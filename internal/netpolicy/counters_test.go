package netpolicy

import (
	"net/netip"
	"sync"
	"testing"
)

type testCounters struct {
	mu        sync.Mutex
	decisions map[string]int
	out, in   int64
}

func (c *testCounters) GatewayDecision(d string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.decisions[d]++
}

func (c *testCounters) GatewayBytes(out, in int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out += out
	c.in += in
}

// TestRegistryCounters: every decision and every byte observed reaches
// the operators' counters, rate-limited denial events or not.
func TestRegistryCounters(t *testing.T) {
	c := &testCounters{decisions: map[string]int{}}
	reg := NewRegistry(RegistryConfig{Counters: c, OnDenied: func(string, Denial) {}}, nil)
	a := netip.MustParseAddr("10.9.0.2")
	reg.Add("sb1", a, MustParse("a.test"), Policy{})
	p, _ := reg.peer(a)
	k := reg.observe(p, "a.test", 443, Allowed)
	reg.addBytes(p.sb, k, 100, 2000)
	reg.observe(p, "b.test", 443, Denied)
	reg.observe(p, "b.test", 443, Denied) // no second event, still counted
	if c.decisions[Allowed] != 1 || c.decisions[Denied] != 2 || c.out != 100 || c.in != 2000 {
		t.Fatalf("counters: %+v", c)
	}
}
