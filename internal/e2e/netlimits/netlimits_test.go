// Package netlimits floods a real `cove serve` from one sandbox's network
// namespace, through the real fence, gateway and resolver, and counts what
// the server holds meanwhile: its open descriptors and threads, against
// bounds derived from the per-sandbox limits it was given. The tests need
// root; they skip otherwise.
package netlimits

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
	"github.com/cove-dev/cove/internal/nsthread"
	cove "github.com/cove-dev/cove/sdk/go"
)

func TestMain(m *testing.M) { e2etest.Main(m) }

const (
	flood      = 10000
	maxConns   = 64
	maxQueries = 16
	// slack is what the server's counts may move by on their own: the
	// API's connections, the test's SDK calls, the recorder of a command.
	slack = 32
)

// initPID is the host pid of a sandbox's init, as runc reports it.
func initPID(t *testing.T, s *e2etest.Server, id string) int {
	t.Helper()
	out, err := exec.Command("runc", "--root", filepath.Join(s.DataDir, "runc"), "state", id).Output()
	if err != nil {
		t.Fatalf("runc state %s: %v", id, err)
	}
	var st struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.PID == 0 {
		t.Fatalf("runc state %s: %q %v", id, out, err)
	}
	return st.PID
}

// netnsOf opens a sandbox's network namespace (its init's); cleanup
// closes it.
func netnsOf(t *testing.T, s *e2etest.Server, id string) *os.File {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", initPID(t, s, id)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// in runs fn on a thread inside the namespace ns: the sockets it makes
// belong to the namespace, and may be used from anywhere after.
func in(t *testing.T, ns *os.File, fn func() error) {
	t.Helper()
	if err := nsthread.Run(int(ns.Fd()), unix.CLONE_NEWNET, fn); err != nil {
		t.Fatal(err)
	}
}

// usage is what the server holds: descriptors by kind, and threads.
type usage struct {
	sockets, pipes, others, threads int
}

func (u usage) String() string {
	return fmt.Sprintf("%d sockets, %d pipes, %d other descriptors, %d threads", u.sockets, u.pipes, u.others, u.threads)
}

func usageOf(t *testing.T, pid int) usage {
	t.Helper()
	http.DefaultClient.CloseIdleConnections() // the test's own, to the API
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var u usage
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		switch {
		case err != nil: // closed meanwhile
		case strings.HasPrefix(target, "socket:"):
			u.sockets++
		case strings.HasPrefix(target, "pipe:"):
			u.pipes++
		default:
			u.others++
		}
	}
	th, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	u.threads = len(th)
	return u
}

// within reports whether u stays within base plus what n relayed
// connections and q queries in flight hold: two sockets a connection (the
// gateway relays without splice pipes); a socket a query; a thread each
// (a netlink question of the gateway's, an exchange).
func within(u, base usage, n, q int) bool {
	return u.sockets <= base.sockets+2*n+q+slack &&
		u.pipes <= base.pipes+slack &&
		u.others <= base.others+slack &&
		u.threads <= base.threads+n+q+slack
}

// back reports whether u is back at base but for a socket or two of the
// API's and the database's files (its pool opens another connection as
// the events come).
func back(u, base usage) bool {
	return u.sockets <= base.sockets+2 && u.others <= base.others+slack && u.pipes <= base.pipes+slack
}

// settle polls cond until it holds, failing with what() after two
// minutes: a guard for a machine shared by many, not a measure.
func settle(t *testing.T, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("did not settle: %s", what())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// observed sums a sandbox's observations that match.
func observed(t *testing.T, c *cove.Client, id string, match func(api.NetworkObservation) bool) int64 {
	t.Helper()
	v, err := c.Network(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, o := range v.Observations {
		if match(o) {
			n += o.Count
		}
	}
	return n
}

func limited(reason string) func(api.NetworkObservation) bool {
	return func(o api.NetworkObservation) bool { return o.Decision == "denied" && o.Reason == reason }
}

// deniedEvents lists a sandbox's network.denied events.
func deniedEvents(t *testing.T, c *cove.Client, id string) []api.Event {
	t.Helper()
	var out []api.Event
	q := cove.EventQuery{Sandbox: id, Types: []string{"network.denied"}, Limit: 1000}
	for {
		page, err := c.Events(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Items...)
		if page.NextCursor == "" || len(page.Items) == 0 {
			return out
		}
		q.After = page.NextCursor
	}
}

// TestFloodFromOneSandbox: sandbox A opens 10,000 connections to a host
// that accepts and never answers, then sends 10,000 DNS queries for names
// its policy allows to an upstream resolver that never answers. The
// server admits --sandbox-max-connections of the connections and
// --sandbox-max-dns-queries of the queries at a time, resets or REFUSEs
// the rest at once and counts them as denials with their reason; its
// descriptors and threads stay within what the admitted ones need;
// sandbox B resolves a name and fetches a page meanwhile; and once the
// flood stops the server's counts are back where they were.
func TestFloodFromOneSandbox(t *testing.T) {
	host := e2etest.StartTestHost(t)
	silent := host.Listen(t, "tcp", host.Addr.String()+":9").(net.Listener)
	var (
		held   []net.Conn
		heldMu sync.Mutex
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, c)
			heldMu.Unlock()
		}
	})
	defer func() {
		silent.Close()
		wg.Wait()
		for _, c := range held {
			c.Close()
		}
	}()
	host.Listen(t, "udp", host.Addr.String()+":53") // the upstream resolver: never read
	host.ServeHTTP(t, host.Addr.String()+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the test host")
	}))

	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0",
		"--dns-upstream", host.Addr.String()+":53", "--dns-static", "web.test="+host.Addr.String(),
		"--sandbox-max-connections", fmt.Sprint(maxConns), "--sandbox-max-dns-queries", fmt.Sprint(maxQueries)))
	a := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{host.Addr.String() + "/32:9", "*.flood.test"}}})
	b := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{"web.test:80"}}})
	la, lb := s.Link(t, a.ID), s.Link(t, b.ID)
	nsA, nsB := netnsOf(t, s, a.ID), netnsOf(t, s, b.ID)
	silentDst := netip.AddrPortFrom(host.Addr, 9).String()

	// servedB: B resolves web.test through the node's resolver and fetches
	// a page from it through the gateway.
	servedB := func(when string) {
		t.Helper()
		var (
			dc *net.UDPConn
			hc net.Conn
		)
		in(t, nsB, func() (err error) {
			if dc, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(lb.HostAddr, 53))); err != nil {
				return err
			}
			hc, err = net.Dial("tcp4", netip.AddrPortFrom(host.Addr, 80).String())
			return err
		})
		defer dc.Close()
		defer hc.Close()
		dc.SetDeadline(time.Now().Add(30 * time.Second)) // guards, not measures
		hc.SetDeadline(time.Now().Add(30 * time.Second))
		co := &dns.Conn{Conn: dc}
		if err := co.WriteMsg(new(dns.Msg).SetQuestion("web.test.", dns.TypeA)); err != nil {
			t.Fatal(err)
		}
		resp, err := co.ReadMsg()
		if err != nil || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
			t.Fatalf("%s: B's lookup of web.test: %v %v", when, resp, err)
		}
		fmt.Fprintf(hc, "GET / HTTP/1.0\r\nHost: web.test\r\n\r\n")
		body, err := io.ReadAll(hc)
		if err != nil || !strings.Contains(string(body), "hello from the test host") {
			t.Fatalf("%s: B's fetch: %q %v", when, body, err)
		}
	}
	servedB("before")
	pid := s.PID()
	base := usageOf(t, pid)
	t.Logf("before: cove serve holds %v", base)

	t.Run("connections", func(t *testing.T) {
		conns := make([]net.Conn, 0, flood)
		resetEarly := 0
		in(t, nsA, func() error {
			// Each connection has a source port of its own (the namespace
			// is A's, and its ports ours): a port freed by a reset during
			// the handshake, taken again at once by the kernel for the
			// next connect, can leave that handshake stuck for minutes.
			for i := range flood {
				d := net.Dialer{LocalAddr: &net.TCPAddr{Port: 10000 + i}}
				c, err := d.Dial("tcp4", silentDst)
				if errors.Is(err, syscall.ECONNRESET) {
					resetEarly++ // refused before the connect returned
					continue
				}
				if err != nil {
					return fmt.Errorf("dial %s after %d: %w", silentDst, len(conns), err)
				}
				c.Write([]byte{0}) // raw bytes: decided by address
				conns = append(conns, c)
			}
			return nil
		})
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		t.Logf("%d connections were reset before their connect returned", resetEarly)

		state := func() string {
			heldMu.Lock()
			defer heldMu.Unlock()
			return fmt.Sprintf("allowed %d, refused %d; the silent host accepted %d; cove serve holds %v",
				observed(t, s.Admin, a.ID, func(o api.NetworkObservation) bool { return o.Decision == "allowed" }),
				observed(t, s.Admin, a.ID, limited("connection_limit")), len(held), usageOf(t, pid))
		}
		settle(t, state, func() bool {
			return observed(t, s.Admin, a.ID, limited("connection_limit")) == flood-maxConns &&
				observed(t, s.Admin, a.ID, func(o api.NetworkObservation) bool { return o.Decision == "allowed" }) == maxConns
		})
		u := usageOf(t, pid)
		t.Logf("during: %s", state())
		if !within(u, base, maxConns, 0) {
			t.Errorf("during the flood cove serve holds %v; before it held %v, and %d connections may add %d sockets, %d threads", u, base, maxConns, 2*maxConns, maxConns)
		}
		heldMu.Lock()
		if len(held) != maxConns {
			t.Errorf("the silent host accepted %d connections, want %d", len(held), maxConns)
		}
		heldMu.Unlock()
		servedB("during the connection flood")

		// The denials are events, with their reason.
		evs := deniedEvents(t, s.Admin, a.ID)
		found := false
		for _, e := range evs {
			found = found || e.Data["reason"] == "connection_limit"
		}
		if !found {
			t.Errorf("no network.denied event with reason connection_limit among %+v", evs)
		}

		// The flood stops: A's connections are aborted.
		for _, c := range conns {
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
		conns = nil
		settle(t, func() string {
			return fmt.Sprintf("cove serve holds %v; before it held %v", usageOf(t, pid), base)
		}, func() bool { return back(usageOf(t, pid), base) })
		t.Logf("after: cove serve holds %v", usageOf(t, pid))
		servedB("after the connection flood")
	})

	t.Run("queries", func(t *testing.T) {
		var c *net.UDPConn
		in(t, nsA, func() (err error) {
			c, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(la.HostAddr, 53)))
			return err
		})
		defer c.Close()
		const window = 2 * maxQueries
		var (
			mu       sync.Mutex
			answered = map[uint16]int{}
			slots    = make(chan struct{}, window)
			rwg      sync.WaitGroup
		)
		rwg.Go(func() {
			buf := make([]byte, 4096)
			for {
				n, err := c.Read(buf)
				if err != nil {
					return
				}
				m := new(dns.Msg)
				if m.Unpack(buf[:n]) != nil {
					continue
				}
				mu.Lock()
				if _, dup := answered[m.Id]; !dup {
					answered[m.Id] = m.Rcode
					<-slots
				}
				mu.Unlock()
			}
		})
		var peak usage
		for i := range flood {
			select {
			case slots <- struct{}{}:
			case <-time.After(2 * time.Minute): // a guard: a query went unanswered
				t.Fatalf("query %d: the window of %d did not open; answered %d", i, window, len(answered))
			}
			m := new(dns.Msg).SetQuestion(fmt.Sprintf("q%d.flood.test.", i), dns.TypeA)
			m.Id = uint16(i)
			b, _ := m.Pack()
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			if i%100 == 0 {
				u := usageOf(t, pid)
				peak = usage{max(peak.sockets, u.sockets), max(peak.pipes, u.pipes), max(peak.others, u.others), max(peak.threads, u.threads)}
			}
			if i == flood/2 {
				servedB("during the query flood")
			}
		}
		settle(t, func() string {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("%d of %d answered", len(answered), flood)
		}, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(answered) == flood
		})
		c.Close()
		rwg.Wait()
		rcodes := map[int]int{}
		for _, rc := range answered {
			rcodes[rc]++
		}
		t.Logf("answers: %d REFUSED, %d SERVFAIL; at most %v", rcodes[dns.RcodeRefused], rcodes[dns.RcodeServerFailure], peak)
		if rcodes[dns.RcodeRefused]+rcodes[dns.RcodeServerFailure] != flood || rcodes[dns.RcodeRefused] == 0 || rcodes[dns.RcodeServerFailure] < maxQueries {
			t.Errorf("answers by rcode %v: want only REFUSED and SERVFAIL, at least %d SERVFAIL", rcodes, maxQueries)
		}
		if got := observed(t, s.Admin, a.ID, limited("dns_limit")); got != int64(rcodes[dns.RcodeRefused]) {
			t.Errorf("%d dns_limit denials observed, want one per REFUSED (%d)", got, rcodes[dns.RcodeRefused])
		}
		// A query in flight holds the upstream exchange's socket.
		if !within(peak, base, maxConns, maxQueries) || peak.sockets > base.sockets+maxQueries+slack {
			t.Errorf("during the flood cove serve held up to %v; before the floods %v; %d queries may add %d sockets", peak, base, maxQueries, maxQueries)
		}
		// Thousands of distinct names were refused; the events say how
		// many were held back by the per-sandbox rate.
		settle(t, func() string { return "no network.denied event counts suppressed denials" }, func() bool {
			for _, e := range deniedEvents(t, s.Admin, a.ID) {
				if n, ok := e.Data["suppressed"].(float64); ok && n > 0 {
					return true
				}
			}
			return false
		})
		evs := deniedEvents(t, s.Admin, a.ID)
		t.Logf("%d network.denied events for %d denials", len(evs), rcodes[dns.RcodeRefused]+flood-maxConns)
		if len(evs) >= rcodes[dns.RcodeRefused] {
			t.Errorf("%d network.denied events for %d dns_limit denials: not rate-limited", len(evs), rcodes[dns.RcodeRefused])
		}
		settle(t, func() string {
			return fmt.Sprintf("cove serve holds %v; before it held %v", usageOf(t, pid), base)
		}, func() bool { return back(usageOf(t, pid), base) })
		t.Logf("after: cove serve holds %v", usageOf(t, pid))
		servedB("after the query flood")
	})
}
