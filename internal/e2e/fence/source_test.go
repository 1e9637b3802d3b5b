package fence

import (
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/node/network/networktest"
	cove "github.com/cove-dev/cove/sdk/go"
)

// TestForgedSourceDropped forges, from sandbox A's eth0, DNS queries to
// the node's resolver that claim the address of sandbox B (of another
// team) and of a test host outside. Sandbox root has no CAP_NET_RAW, so
// the test forges for it, from the host inside A's network namespace. A
// query from A's own address follows; its answer is the barrier (see
// networktest.ForgeThenAsk).
//
// The forged queries reach the host side of A's veth (a counter of the
// test's before the fence sees them) and nothing past it (a counter of the
// test's after the fence's input chain sees none): the fence drops them,
// by its (interface, address) check or by reverse-path filtering. So the
// resolver never answers them (B's and the host's listeners get nothing),
// and B's team log gets no network.denied event with a name of A's choice.
func TestForgedSourceDropped(t *testing.T) {
	s := e2etest.StartServer(t)
	a := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{})
	teamB := s.NewTeam("fence-b")
	b := e2etest.Create(t, teamB, api.CreateSandboxRequest{})
	la, lb := s.Link(t, a.ID), s.Link(t, b.ID)
	host := e2etest.StartTestHost(t)

	const port = 40053
	victimB := netip.AddrPortFrom(lb.SandboxAddr, port)
	victimT := netip.AddrPortFrom(host.Addr, port)
	inB, err := networktest.ListenIn(netnsOf(t, s, b.ID), victimB)
	if err != nil {
		t.Fatal(err)
	}
	defer inB.Close()
	inT, err := networktest.ListenIn(host.NSPath(), victimT)
	if err != nil {
		t.Fatal(err)
	}
	defer inT.Close()

	// Counters around the fence, in a table of the test's: packets from
	// A's veth claiming a victim's address, as they arrive (before the
	// fence's raw-priority check) and once past everything that could drop
	// them (after the fence's input chain, just before a socket).
	table := "covefp" + e2etest.RunID()
	match := fmt.Sprintf("iifname %q ip saddr { %s, %s } counter", la.HostIface, lb.SandboxAddr, host.Addr)
	script := fmt.Sprintf(`table inet %[1]s {
	chain arrived { type filter hook prerouting priority -400; policy accept; %[2]s; }
	chain delivered { type filter hook input priority 400; policy accept; %[2]s; }
}
`, table, match)
	if out, err := nft(script); err != nil {
		t.Fatalf("nft: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", table).Run() })

	forgedName := "forged-" + e2etest.RunID() + ".test" // not allowed: it would be observed as denied
	markerName := "marker-" + e2etest.RunID() + ".test"
	reply, err := networktest.ForgeThenAsk(netnsOf(t, s, a.ID), netip.AddrPortFrom(la.HostAddr, 53),
		[]networktest.Datagram{{From: victimB, Payload: query(t, forgedName)}, {From: victimT, Payload: query(t, forgedName)}},
		query(t, markerName), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var m dns.Msg
	if err := m.Unpack(reply); err != nil || len(m.Question) != 1 || m.Question[0].Name != dns.Fqdn(markerName) || m.Rcode != dns.RcodeNameError {
		t.Fatalf("answer to A's own query: %v %v", m, err)
	}

	if n := counter(t, table, "arrived"); n != 2 {
		t.Fatalf("%d forged datagrams arrived on %s, want 2: the test did not forge what it meant to", n, la.HostIface)
	}
	if n := counter(t, table, "delivered"); n != 0 {
		t.Errorf("%d forged datagrams got past the fence", n)
	}
	if got, ok := networktest.Received(inB); ok {
		t.Errorf("sandbox B received %d bytes: the resolver answered a query forged with its address", len(got))
	}
	if got, ok := networktest.Received(inT); ok {
		t.Errorf("the test host received %d bytes: the resolver answered a query forged with its address", len(got))
	}
	if evs := deniedEvents(t, teamB, b.ID); len(evs) != 0 {
		t.Errorf("network.denied events in B's team log: %+v", evs)
	}
	// A's own denied query is in A's log: events are written before the
	// answer goes out, so the check above could have seen B's.
	found := false
	for _, e := range deniedEvents(t, s.Admin, a.ID) {
		found = found || e.Data["destination"] == markerName
	}
	if !found {
		t.Errorf("no network.denied event for A's own query of %s", markerName)
	}
}

func nft(script string) ([]byte, error) {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	return cmd.CombinedOutput()
}

var counterRE = regexp.MustCompile(`counter packets (\d+)`)

func counter(t *testing.T, table, chain string) int {
	t.Helper()
	out, err := exec.Command("nft", "list", "chain", "inet", table, chain).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list chain %s: %v %s", chain, err, out)
	}
	m := counterRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no counter in %s", out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func query(t *testing.T, name string) []byte {
	t.Helper()
	b, err := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func deniedEvents(t *testing.T, c *cove.Client, sandboxID string) []api.Event {
	t.Helper()
	page, err := c.Events(t.Context(), cove.EventQuery{Sandbox: sandboxID, Types: []string{"network.denied"}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return page.Items
}
