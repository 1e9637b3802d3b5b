package network

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestFence puts a process in a network namespace of its own, as runc
// does, and checks what Attach makes of it: only loopback before, eth0 with
// its address and a default route after, the host side in the table's set,
// every TCP connection redirected to the gateway port and UDP to anything
// but port 53 dropped; then Detach removes it all.
func TestFence(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (netns, veth, nftables)")
	}
	b := make([]byte, 3)
	rand.Read(b)
	run := hex.EncodeToString(b)
	ns := "cvft-" + run
	table := "covefencetest" + run
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("netns: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	sleeper := exec.Command("ip", "netns", "exec", ns, "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })

	gw, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	gwPort := uint16(gw.Addr().(*net.TCPAddr).Port)
	f, err := New(Config{
		Dir: t.TempDir(), Subnet: netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 150+int(b[0])%50, b[1])),
		Table: table, GatewayPort: gwPort, DNSPort: gwPort + 1,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(context.Background()) }) // t.Context() is done by then

	inside := func(args ...string) string {
		out, _ := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
		return string(out)
	}
	if out := inside("ip", "-o", "link"); strings.Contains(out, "eth0") {
		t.Fatalf("eth0 before Attach: %s", out)
	}
	l, err := f.Attach(t.Context(), "sbx_fencetest"+run, sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if out := inside("ip", "-4", "-o", "addr", "show", "eth0"); !strings.Contains(out, l.SandboxAddr.String()+"/30") {
		t.Errorf("eth0 address: %s", out)
	}
	if out := inside("ip", "route"); !strings.Contains(out, "default via "+l.HostAddr.String()) {
		t.Errorf("routes: %s", out)
	}
	if out, _ := exec.Command("nft", "list", "set", "inet", table, "sandboxes").CombinedOutput(); !strings.Contains(string(out), l.HostIface) {
		t.Errorf("set: %s", out)
	}

	// Any TCP destination, the host's own address included, ends at the
	// gateway.
	got := make(chan string, 1)
	go func() {
		c, err := gw.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(io.LimitReader(c, 5))
		got <- string(b) + " from " + c.RemoteAddr().(*net.TCPAddr).IP.String()
	}()
	inside("sh", "-c", "printf hello | timeout 3 busybox nc -w 1 "+l.HostAddr.String()+" 9 || true")
	select {
	case g := <-got:
		if g != "hello from "+l.SandboxAddr.String() {
			t.Errorf("the gateway got %q", g)
		}
	case <-time.After(5 * time.Second):
		t.Error("a TCP connection from the sandbox did not reach the gateway")
	}
	// Loopback is not fenced: a local service on the gateway's port (here
	// the gateway itself) answers a local client, as it would after a
	// killed node left its table behind.
	go func() {
		if c, err := gw.Accept(); err == nil {
			c.Close()
		}
	}()
	if c, err := net.DialTimeout("tcp4", fmt.Sprintf("127.0.0.1:%d", gwPort), 5*time.Second); err != nil {
		t.Errorf("loopback to the gateway's port: %v", err)
	} else {
		c.Close()
	}
	if err := f.Detach(t.Context(), "sbx_fencetest"+run); err != nil {
		t.Fatal(err)
	}
	if out := inside("ip", "-o", "link"); strings.Contains(out, "eth0") {
		t.Errorf("eth0 after Detach: %s", out)
	}
	if _, err := net.InterfaceByName(l.HostIface); err == nil {
		t.Errorf("%s left on the host", l.HostIface)
	}
	if out, _ := exec.Command("nft", "list", "set", "inet", table, "sandboxes").CombinedOutput(); strings.Contains(string(out), l.HostIface) {
		t.Errorf("set after Detach: %s", out)
	}
}

// TestLay: Lay fences a link while the sandbox starts, before any of its
// interfaces exists; Attach then makes the veth pair with its peer inside
// the sandbox as eth0; a laid link that is never attached (a start that
// failed) leaves nothing after Detach; an Attach that cannot make eth0
// (the name is taken in there) leaves no interface on the host.
func TestLay(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (netns, veth, nftables)")
	}
	b := make([]byte, 3)
	rand.Read(b)
	run := hex.EncodeToString(b)
	ns := "cvfl-" + run
	pid := bareSandbox(t, ns)
	table := "covelaytest" + run
	f, err := New(Config{
		Dir: t.TempDir(), Subnet: netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 100+int(b[0])%50, b[1])),
		Table: table, GatewayPort: 1, DNSPort: 2,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(context.Background()) })
	inside := func(args ...string) string {
		out, _ := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
		return string(out)
	}
	fenced := func(iface string) bool {
		out, _ := exec.Command("nft", "list", "set", "inet", table, "sandboxes").CombinedOutput()
		return strings.Contains(string(out), iface)
	}
	onHost := func(name string) bool { _, err := net.InterfaceByName(name); return err == nil }

	// Laid, never attached, then detached.
	failed := "sbx_laytestfailed" + run
	l, err := f.Lay(t.Context(), failed)
	if err != nil {
		t.Fatal(err)
	}
	if onHost(l.HostIface) || !fenced(l.HostIface) {
		t.Fatalf("laid link: host end %v, fenced %v", onHost(l.HostIface), fenced(l.HostIface))
	}
	if err := f.Detach(t.Context(), failed); err != nil {
		t.Fatal(err)
	}
	if onHost(l.HostIface) || fenced(l.HostIface) {
		t.Errorf("after Detach of a laid link: host end %v, fenced %v", onHost(l.HostIface), fenced(l.HostIface))
	}

	// eth0 taken in the sandbox: Attach fails and makes nothing.
	if out, err := exec.Command("ip", "netns", "exec", ns, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "taken0").CombinedOutput(); err != nil {
		t.Fatalf("an eth0 of the sandbox: %v: %s", err, out)
	}
	taken := "sbx_laytesttaken" + run
	if l, err = f.Lay(t.Context(), taken); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Attach(t.Context(), taken, pid); err == nil {
		t.Fatal("Attach over a taken eth0 succeeded")
	}
	if onHost(l.HostIface) {
		t.Errorf("a failed Attach left %s on the host", l.HostIface)
	}
	if err := f.Detach(t.Context(), taken); err != nil {
		t.Fatal(err)
	}
	if fenced(l.HostIface) {
		t.Errorf("after Detach of a failed Attach: still fenced")
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "ip", "link", "del", "eth0").CombinedOutput(); err != nil {
		t.Fatalf("remove the sandbox's eth0: %v: %s", err, out)
	}

	// Laid, then attached: the peer is the sandbox's eth0.
	id := "sbx_laytest" + run
	if l, err = f.Lay(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if out := inside("ip", "-o", "link"); strings.Contains(out, "eth0") {
		t.Fatalf("eth0 before Attach: %s", out)
	}
	if _, err := f.Attach(t.Context(), id, pid); err != nil {
		t.Fatal(err)
	}
	if out := inside("ip", "-4", "-o", "addr", "show", "eth0"); !strings.Contains(out, l.SandboxAddr.String()+"/30") {
		t.Errorf("eth0 address: %s", out)
	}
	if out := inside("ip", "route"); !strings.Contains(out, "default via "+l.HostAddr.String()) {
		t.Errorf("routes: %s", out)
	}
	if !onHost(l.HostIface) || !fenced(l.HostIface) {
		t.Errorf("attached: host end %v, fenced %v", onHost(l.HostIface), fenced(l.HostIface))
	}
	if err := f.Detach(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if out := inside("ip", "-o", "link"); strings.Contains(out, "eth0") || onHost(l.HostIface) || fenced(l.HostIface) {
		t.Errorf("after Detach: %s, host end %v", out, onHost(l.HostIface))
	}
}
