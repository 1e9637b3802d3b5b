package guest

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/agent/wire"
)

func TestParseSockLine(t *testing.T) {
	tests := []struct {
		name, line    string
		local, remote string // "" remote: unconnected
		inode         uint64
	}{
		{"ipv4", "   3: 0100007F:A1B2 0200000A:01BB 01 00000000:00000000 00:00000000 00000000  1000        0 123456 1 0000000000000000 20 4 30 10 -1",
			"127.0.0.1:41394", "10.0.0.2:443", 123456},
		{"ipv4 unconnected udp", "  25: 0200580A:D431 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 777 2 0000000000000000 0",
			"10.88.0.2:54321", "", 777},
		{"ipv6 mapped", "   0: 0000000000000000FFFF00000200580A:C350 0000000000000000FFFF00000101A8C0:0050 01 00000000:00000000 00:00000000 00000000  1000        0 42 1 0000000000000000 20 4 0 10 -1",
			"10.88.0.2:50000", "192.168.1.1:80", 42},
		{"ipv6", "   1: 00000000000000000000000001000000:0016 000080FE00000000FF0F0000010000FE:1F90 01 00000000:00000000 00:00000000 00000000     0        0 9 1",
			"[::1]:22", "[fe80::fff:fe00:1]:8080", 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := parseSockLine(tt.line)
			if !ok {
				t.Fatal("not parsed")
			}
			var remote netip.AddrPort
			if tt.remote != "" {
				remote = netip.MustParseAddrPort(tt.remote)
			}
			if e.local != netip.MustParseAddrPort(tt.local) || e.remote != remote || e.inode != tt.inode {
				t.Errorf("got %v %v %d; want %s %s %d", e.local, e.remote, e.inode, tt.local, tt.remote, tt.inode)
			}
		})
	}
	for _, bad := range []string{"", "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
		"   3: 0100007F A1B2 0200000A:01BB 01 0 0 0 0 0 1", "   3: 0100:A1B2 0200000A:01BB 01 0 0 0 0 0 1"} {
		if _, ok := parseSockLine(bad); ok {
			t.Errorf("parsed %q", bad)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	// A process names itself: parentheses and spaces in comm must not
	// shift the fields.
	ids, err := parseProcStat("42 (a) 1 2 3 (x) S 7 8 9 0 -1")
	if err != nil || ids != (procIDs{ppid: 7, pgrp: 8, session: 9}) {
		t.Fatalf("got %+v, %v", ids, err)
	}
	if _, err := parseProcStat("42 (x) S 7"); err == nil {
		t.Error("short stat parsed")
	}
}

// TestSocketOwners finds the command behind sockets of its processes: the
// command's own process, a descendant that left its group and session, a
// background process of a command that has ended, a connected UDP socket;
// and no command for a socket of a process that is none's, for a socket
// that does not exist, and for one whose command closed it.
func TestSocketOwners(t *testing.T) {
	_, c := startServer(t, ServerConfig{})
	tl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	port := tl.Addr().(*net.TCPAddr).Port
	// Each command connects and waits until the test closes its side.
	connect := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d; read -u 3 x", port)
	var conns []net.Conn
	pids := map[string]int{}
	collected := map[string]bool{}
	// Every command ends, and every process it left is reaped, before the
	// server closes: the commands end when the test closes its side.
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		for id, pid := range pids {
			if !collected[id] {
				collect(t, c, id, 0)
			}
			for len(inGroup(pid)) > 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	sock := func(conn net.Conn) wire.Socket {
		// The accepted connection's remote is the command's local side.
		return wire.Socket{Proto: "tcp", Local: conn.RemoteAddr().String(), Remote: conn.LocalAddr().String()}
	}
	start := func(id string, uid int, script string) wire.Socket {
		t.Helper()
		st, err := c.Exec(t.Context(), wire.ExecRequest{ID: id, Argv: []string{"bash", "-c", script}, Env: []string{testPath}, Cwd: "/", UID: uid, GID: uid})
		if err != nil {
			t.Fatal(err)
		}
		pids[id] = st.PID
		tl.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
		conn, err := tl.Accept()
		if err != nil {
			t.Fatalf("%s did not connect: %v", id, err)
		}
		conns = append(conns, conn)
		return sock(conn)
	}

	var socks []wire.Socket
	var want []string
	add := func(s wire.Socket, id string) { socks = append(socks, s); want = append(want, id) }

	add(start("direct", 1000, connect), "direct")
	add(start("as-root", 0, connect), "as-root")
	add(start("setsid", 1000, fmt.Sprintf(`setsid bash -c %q & wait`, connect)), "setsid")
	// The main process ends at once; its background child holds the
	// socket, in the command's process group.
	// The host has read its output and let the agent forget it.
	add(start("ended", 1000, fmt.Sprintf(`(%s) >/dev/null 2>&1 &`, connect)), "ended")
	collect(t, c, "ended", 0)
	collected["ended"] = true
	if err := c.Forget(t.Context(), "ended"); err != nil {
		t.Fatal(err)
	}

	// UDP: a connected datagram socket.
	ul, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	uport := ul.LocalAddr().(*net.UDPAddr).Port
	st, err := c.Exec(t.Context(), wire.ExecRequest{ID: "udp", Argv: []string{"bash", "-c",
		fmt.Sprintf("exec 3<>/dev/udp/127.0.0.1/%d; echo hi >&3; read -u 3 x", uport)}, Env: []string{testPath}, Cwd: "/", UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 16)
	_, from, err := ul.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ul.WriteTo([]byte("\n"), from) // ends the command: bash reads a byte per datagram
		collect(t, c, "udp", 0)
		for len(inGroup(st.PID)) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}()
	add(wire.Socket{Proto: "udp", Local: from.String(), Remote: ul.LocalAddr().String()}, "udp")

	// A process that is no command's: this one.
	mine, err := net.Dial("tcp4", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	add(wire.Socket{Proto: "tcp", Local: mine.LocalAddr().String(), Remote: mine.RemoteAddr().String()}, "")
	// A socket nobody holds.
	add(wire.Socket{Proto: "tcp", Local: "127.0.0.1:1", Remote: "127.0.0.1:2"}, "")
	// The right local address with the wrong remote one.
	wrong := socks[0]
	wrong.Remote = "127.0.0.1:1"
	add(wrong, "")

	got, err := c.SocketOwners(t.Context(), socks)
	if err != nil {
		t.Fatal(err)
	}
	for i := range socks {
		if got[i] != want[i] {
			t.Errorf("%+v: owner %q, want %q", socks[i], got[i], want[i])
		}
	}

	// Once the command closed its socket, it owns nothing.
	conns[0].Close()
	collect(t, c, "direct", 0)
	collected["direct"] = true
	if got, err := c.SocketOwners(t.Context(), socks[:1]); err != nil || got[0] != "" {
		t.Errorf("closed socket: owner %q, %v", got, err)
	}

	// Requests beyond the bound are refused.
	if _, err := c.SocketOwners(t.Context(), make([]wire.Socket, wire.MaxOwnerSockets+1)); err == nil {
		t.Error("an oversized request was sent")
	}
}

// TestSockDiag: the kernel's exact lookup finds the inode /proc/net/tcp
// shows for a connection, a UDP socket by its addresses (an unconnected
// one for any remote), and nothing for a closed socket.
func TestSockDiag(t *testing.T) {
	d, err := openSockDiag()
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	local, remote := addrPortOf(c.LocalAddr()), addrPortOf(c.RemoteAddr())
	want, err := socketInodesProc(sockKey{"tcp", local, remote})
	if err != nil || want == 0 {
		t.Fatalf("/proc/net/tcp: %d %v", want, err)
	}
	if got, err := d.inode("tcp", local, remote); err != nil || got != want {
		t.Errorf("tcp: inode %d, %v; want %d", got, err, want)
	}
	if got, err := d.inode("tcp", local, netip.MustParseAddrPort("127.0.0.1:1")); err != nil || got != 0 {
		t.Errorf("tcp, wrong remote: inode %d, %v", got, err)
	}
	c.Close()
	if got, err := d.inode("tcp", local, remote); err != nil || got != 0 {
		t.Errorf("closed tcp: inode %d, %v", got, err)
	}

	u, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	ulocal := addrPortOf(u.LocalAddr())
	uwant, err := socketInodesProc(sockKey{"udp", ulocal, netip.AddrPort{}})
	if err != nil || uwant == 0 {
		t.Fatalf("/proc/net/udp: %d %v", uwant, err)
	}
	if got, err := d.inode("udp", ulocal, netip.MustParseAddrPort("10.1.2.3:53")); err != nil || got != uwant {
		t.Errorf("unconnected udp: inode %d, %v; want %d", got, err, uwant)
	}
}

func addrPortOf(a net.Addr) netip.AddrPort {
	ap := netip.MustParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// socketInodesProc finds one socket's inode in /proc/net alone.
func socketInodesProc(k sockKey) (uint64, error) {
	out := make([]uint64, 1)
	err := procNetInodes([]sockKey{k}, []bool{true}, out)
	return out[0], err
}
