package netlimits

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/e2e/e2etest"
)

// openFDs counts the descriptors a process holds.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	http.DefaultClient.CloseIdleConnections() // the test's own, to the API
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// tcpStates counts, by state, the TCP sockets of pid's network namespace
// whose remote end is dst (/proc/PID/net/tcp, states as the kernel
// numbers them: 1 ESTABLISHED, 5 FIN_WAIT2, 6 TIME_WAIT…).
func tcpStates(t *testing.T, pid int, dst netip.AddrPort) map[int]int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := dst.Addr().As4()
	want := fmt.Sprintf("%08X:%04X", binary.LittleEndian.Uint32(a[:]), dst.Port())
	states := map[int]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[2] != want {
			continue
		}
		var st int
		fmt.Sscanf(f[3], "%X", &st)
		states[st]++
	}
	return states
}

// tcpState is the kernel's state of a connection's socket.
func tcpState(c net.Conn) int {
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return -1
	}
	st := -1
	raw.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			st = int(info.State)
		}
	})
	return st
}

const (
	tcpEstablished = 1
	tcpTimeWait    = 6
	tcpClose       = 7
)

// TestConnectionFloodLeavesNothingBehind: a program in a sandbox opens
// 5,000 connections to an allowed host that accepts and never reads or
// closes, sends a line on each and exits. The gateway admits the default
// 512 and resets the rest at once; while the admitted ones are held
// `cove serve` holds at most two descriptors for each (the sandbox's
// socket and the destination's: no splice pipes), the sandbox is left
// with exactly the admitted connections (the reset ones are closed on its
// side too), and once the program's sockets are closed and
// --gateway-half-close-timeout has passed (the relays, half-closed toward
// a destination that never answers, end) the server is back within 20
// descriptors of where it started.
func TestConnectionFloodLeavesNothingBehind(t *testing.T) {
	const (
		opened   = 5000
		admitted = 512 // --sandbox-max-connections, by default
		slackFDs = 20
	)
	host := e2etest.StartTestHost(t)
	silent := host.Listen(t, "tcp", host.Addr.String()+":7").(net.Listener)
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
	accepted := func() int {
		heldMu.Lock()
		defer heldMu.Unlock()
		return len(held)
	}

	s := e2etest.StartServer(t, e2etest.WithArgs("--warm-pool", "0", "--gateway-half-close-timeout", "2s"))
	sb := e2etest.Create(t, s.Admin, api.CreateSandboxRequest{Network: &api.NetworkPolicy{Allow: []string{host.Addr.String() + "/32:7"}}})
	ns := netnsOf(t, s, sb.ID)
	sbPID := initPID(t, s, sb.ID)
	dst := netip.AddrPortFrom(host.Addr, 7)
	pid := s.PID()
	base := openFDs(t, pid)
	t.Logf("before: cove serve holds %d descriptors", base)

	conns := make([]net.Conn, 0, opened)
	resetEarly := 0
	in(t, ns, func() error {
		for i := range opened {
			// A source port of its own each (see TestFloodFromOneSandbox).
			d := net.Dialer{LocalAddr: &net.TCPAddr{Port: 20000 + i}}
			c, err := d.Dial("tcp4", dst.String())
			if errors.Is(err, syscall.ECONNRESET) {
				resetEarly++
				continue
			}
			if err != nil {
				return fmt.Errorf("dial %s after %d: %w", dst, len(conns), err)
			}
			// A line that is neither HTTP nor TLS: relayed raw. Those reset
			// already fail to send it.
			c.Write([]byte(`{"line":1}` + "\n"))
			conns = append(conns, c)
		}
		return nil
	})
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
		conns = nil
	}
	defer closeAll()

	allowed := func() int64 {
		return observed(t, s.Admin, sb.ID, func(o api.NetworkObservation) bool { return o.Decision == "allowed" })
	}
	refused := func() int64 { return observed(t, s.Admin, sb.ID, limited("connection_limit")) }
	settle(t, func() string {
		return fmt.Sprintf("allowed %d, refused %d, the host accepted %d; cove serve holds %d descriptors", allowed(), refused(), accepted(), openFDs(t, pid))
	}, func() bool {
		return allowed() == admitted && refused() == opened-admitted && accepted() == admitted
	})

	// The peak, sampled while the connections are held.
	peak := 0
	for range 20 {
		peak = max(peak, openFDs(t, pid))
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("held: cove serve holds up to %d descriptors for %d connections (%d reset before their connect returned)", peak, admitted, resetEarly)
	if peak > base+2*admitted+slackFDs {
		t.Errorf("with %d connections held cove serve holds %d descriptors, %.1f a connection; before it held %d; want at most %d (two a connection)",
			admitted, peak, float64(peak-base)/admitted, base, base+2*admitted+slackFDs)
	}

	// The sandbox's side: the admitted connections are established, the
	// reset ones closed, and nothing else is left in its namespace.
	settle(t, func() string {
		n := map[int]int{}
		for _, c := range conns {
			n[tcpState(c)]++
		}
		return fmt.Sprintf("the program's sockets by state %v; the namespace's %v", n, tcpStates(t, sbPID, dst))
	}, func() bool {
		est, closed := 0, 0
		for _, c := range conns {
			switch tcpState(c) {
			case tcpEstablished:
				est++
			case tcpClose:
				closed++
			}
		}
		ns := tcpStates(t, sbPID, dst)
		return est == admitted && closed+resetEarly == opened-admitted &&
			ns[tcpEstablished] == admitted && len(ns) == 1
	})

	// The program exits.
	closeAll()
	settle(t, func() string {
		return fmt.Sprintf("cove serve holds %d descriptors; before it held %d; the sandbox's sockets by state %v", openFDs(t, pid), base, tcpStates(t, sbPID, dst))
	}, func() bool { return openFDs(t, pid) <= base+slackFDs })
	t.Logf("after: cove serve holds %d descriptors", openFDs(t, pid))
	// The gateway ended its half of every relay: the sandbox's side is
	// closed but for TIME_WAIT, which the kernel ends.
	settle(t, func() string {
		return fmt.Sprintf("the sandbox's sockets to %s by state %v", dst, tcpStates(t, sbPID, dst))
	}, func() bool {
		ns := tcpStates(t, sbPID, dst)
		return len(ns) == 0 || len(ns) == 1 && ns[tcpTimeWait] > 0
	})
	if n := accepted(); n != admitted {
		t.Errorf("the host accepted %d connections in all, want %d", n, admitted)
	}
}
