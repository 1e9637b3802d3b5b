package network

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/node/network/networktest"
)

// bareSandbox makes a network namespace with a process in it, as runc
// would, and returns the process's pid; cleanup removes both.
func bareSandbox(t *testing.T, name string) int {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("netns: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	sleeper := exec.Command("ip", "netns", "exec", name, "sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	return sleeper.Process.Pid
}

// responder plays the node's resolver: it answers every datagram on the
// DNS port, in the order they arrive, by echoing it to its source address,
// and records who it answered.
type responder struct {
	pc net.PacketConn
	wg sync.WaitGroup

	mu   sync.Mutex
	seen []string // "source payload"
}

func startResponder(t *testing.T) *responder {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &responder{pc: pc}
	r.wg.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, src, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.seen = append(r.seen, src.(*net.UDPAddr).IP.String()+" "+string(buf[:n]))
			r.mu.Unlock()
			pc.WriteTo(append([]byte("echo:"), buf[:n]...), src)
		}
	})
	t.Cleanup(func() { pc.Close(); r.wg.Wait() })
	return r
}

func (r *responder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seen
	r.seen = nil
	return s
}

// TestFenceSourceAddress: a packet from a sandbox's interface with any
// source but the sandbox's own address is dropped before anything on the
// node reads it, by the table's check of (interface, address) and by
// reverse-path filtering on the host side of the veth, each on its own.
// From sandbox A the test forges datagrams to the resolver port claiming
// the address of sandbox B and of a host outside (a network namespace of
// the test's); a responder on that port echoes whatever reaches it to its
// claimed source, as a DNS server answers. A datagram from A's own address
// follows them; its echo is the barrier.
func TestFenceSourceAddress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (netns, veth, nftables)")
	}
	b := make([]byte, 3)
	rand.Read(b)
	run := hex.EncodeToString(b)
	net24 := fmt.Sprintf("10.%d.%d", 150+int(b[0])%50, b[1])
	table := "covesrctest" + run

	gw, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	resp := startResponder(t)
	f, err := New(Config{
		Dir: t.TempDir(), Subnet: netip.MustParsePrefix(net24 + ".0/25"), Table: table,
		GatewayPort: uint16(gw.Addr().(*net.TCPAddr).Port), DNSPort: uint16(resp.pc.LocalAddr().(*net.UDPAddr).Port),
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(context.Background()) })

	nsA, nsB := "cvsa-"+run, "cvsb-"+run
	pidA, pidB := bareSandbox(t, nsA), bareSandbox(t, nsB)
	la, err := f.Attach(t.Context(), "sbx_srcA"+run, pidA)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := f.Attach(t.Context(), "sbx_srcB"+run, pidB)
	if err != nil {
		t.Fatal(err)
	}

	// A host outside: its own namespace behind a veth of the test's.
	nsT, hostIf := "cvst-"+run, "cvsh"+run
	bareSandbox(t, nsT)
	tHost, tAddr := net24+".129", net24+".130"
	for _, args := range [][]string{
		{"link", "add", hostIf, "type", "veth", "peer", "name", "cvsp" + run},
		{"link", "set", "cvsp" + run, "netns", nsT},
		{"addr", "add", tHost + "/30", "dev", hostIf},
		{"link", "set", hostIf, "up"},
		{"-n", nsT, "addr", "add", tAddr + "/30", "dev", "cvsp" + run},
		{"-n", nsT, "link", "set", "cvsp" + run, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", hostIf).Run() })

	// The fence as installed: the pair in the set, strict rp_filter.
	if out, _ := exec.Command("nft", "list", "set", "inet", table, setSources).CombinedOutput(); !strings.Contains(string(out), fmt.Sprintf("%q . %s", la.HostIface, la.SandboxAddr)) {
		t.Errorf("sources set:\n%s", out)
	}
	rpFilter := "/proc/sys/net/ipv4/conf/" + la.HostIface + "/rp_filter"
	if v, _ := os.ReadFile(rpFilter); strings.TrimSpace(string(v)) != "1" {
		t.Errorf("rp_filter of %s = %q, want 1", la.HostIface, v)
	}

	const port = 40053
	victimB := netip.AddrPortFrom(lb.SandboxAddr, port)
	victimT := netip.AddrPortFrom(netip.MustParseAddr(tAddr), port)
	inB, err := networktest.ListenIn("/run/netns/"+nsB, victimB)
	if err != nil {
		t.Fatal(err)
	}
	defer inB.Close()
	inT, err := networktest.ListenIn("/run/netns/"+nsT, victimT)
	if err != nil {
		t.Fatal(err)
	}
	defer inT.Close()

	setRP := func(v string) {
		t.Helper()
		if err := os.WriteFile(rpFilter, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nftCheck := func(on bool) {
		t.Helper()
		if on {
			if err := f.Init(t.Context()); err != nil { // the whole table again, from the links
				t.Fatal(err)
			}
			return
		}
		// The output chain would drop the echo into sandbox B as well (the
		// node opens nothing into a sandbox but its published ports): it
		// goes too, so that "neither" shows the forged datagrams arrive.
		for _, chain := range []string{chainSources, chainOutput} {
			if out, err := exec.Command("nft", "flush", "chain", "inet", table, chain).CombinedOutput(); err != nil {
				t.Fatalf("flush: %v %s", err, out)
			}
		}
	}
	allRP, _ := os.ReadFile("/proc/sys/net/ipv4/conf/all/rp_filter")
	for i, tt := range []struct {
		name          string
		nft, rpFilter bool
	}{
		{"both", true, true},
		{"the table's check alone", true, false},
		{"reverse-path filtering alone", false, true},
		{"neither: the forged datagrams get through", false, false},
		{"both again", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.rpFilter && strings.TrimSpace(string(allRP)) != "0" {
				t.Skipf("net.ipv4.conf.all.rp_filter is %s here: reverse-path filtering cannot be turned off for one interface", allRP)
			}
			nftCheck(tt.nft)
			setRP(map[bool]string{true: "1", false: "0"}[tt.rpFilter])
			defer setRP("1")
			defer nftCheck(true)

			marker := fmt.Sprintf("marker-%d", i)
			forged := []networktest.Datagram{
				{From: victimB, Payload: []byte(fmt.Sprintf("forged-B-%d", i))},
				{From: victimT, Payload: []byte(fmt.Sprintf("forged-T-%d", i))},
			}
			reply, err := networktest.ForgeThenAsk("/proc/"+fmt.Sprint(pidA)+"/ns/net", netip.AddrPortFrom(la.HostAddr, 53), forged, []byte(marker), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if string(reply) != "echo:"+marker {
				t.Fatalf("reply %q", reply)
			}
			got := resp.take()
			through := !tt.nft && !tt.rpFilter
			want := []string{la.SandboxAddr.String() + " " + marker}
			if through {
				want = []string{lb.SandboxAddr.String() + " forged-B-" + fmt.Sprint(i), tAddr + " forged-T-" + fmt.Sprint(i), want[0]}
			}
			if !slices.Equal(got, want) {
				t.Errorf("the responder read %q, want %q", got, want)
			}
			if through {
				// The check above sees forged datagrams: so do these.
				for _, pc := range []net.PacketConn{inB, inT} {
					pc.SetReadDeadline(time.Now().Add(10 * time.Second))
					if _, _, err := pc.ReadFrom(make([]byte, 100)); err != nil {
						t.Errorf("no reflected datagram at %s: %v", pc.LocalAddr(), err)
					}
				}
				return
			}
			for _, pc := range []net.PacketConn{inB, inT} {
				if b, ok := networktest.Received(pc); ok {
					t.Errorf("%s received %q", pc.LocalAddr(), b)
				}
			}
		})
	}

	// A node that starts again over running sandboxes (Init from the links
	// on disk) puts strict filtering back on their veths.
	setRP("0")
	if err := f.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	if v, _ := os.ReadFile(rpFilter); strings.TrimSpace(string(v)) != "1" {
		t.Errorf("rp_filter of %s after Init = %q, want 1", la.HostIface, v)
	}

	if err := f.Detach(t.Context(), "sbx_srcA"+run); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("nft", "list", "set", "inet", table, setSources).CombinedOutput(); strings.Contains(string(out), la.HostIface) {
		t.Errorf("sources set after Detach:\n%s", out)
	}
}
