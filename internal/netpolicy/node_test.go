package netpolicy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
)

// TestGatewayNeverTheNode is the table of what the gateway decides about
// the node's own addresses, metadata and special-purpose ranges, whatever
// the policy says.
func TestGatewayNeverTheNode(t *testing.T) {
	var (
		node      = netip.MustParseAddr("198.20.0.77") // an address of a host interface (the API listens on it)
		subnet    = netip.MustParsePrefix("10.88.0.0/16")
		arrival   = &net.TCPAddr{IP: net.IPv4(10, 88, 0, 1), Port: 15001} // this sandbox's veth, host side
		ap        = netip.MustParseAddrPort
		resolving = map[string][]netip.Addr{
			"node.example.test":  {node},
			"peer.example.test":  {netip.MustParseAddr("10.88.0.6")},
			"meta.example.test":  {metaAddr},
			"nat64.example.test": {netip.MustParseAddr("64:ff9b::a00:1")},
			"mixed.example.test": {node, apiAddr},
		}
	)
	reg := NewRegistry(RegistryConfig{}, nil)
	reg.Add(sandboxID, sandboxAddr, Policy{}, Policy{})
	g := NewGateway(GatewayConfig{
		Refused:    []netip.Prefix{subnet},
		IsNodeAddr: func(a netip.Addr) bool { return a == node },
		Trusted:    func(name string, a netip.Addr) bool { return name == "meta.example.test" },
	}, reg, func(_ context.Context, name string) ([]netip.Addr, error) { return resolving[name], nil }, nil)

	tests := []struct {
		name    string
		allow   []string
		dst     string
		host    string // a sniffed name the resolver gave the address for
		connect bool   // a CONNECT to host:port of dst
		want    why
	}{
		{name: "loopback", allow: []string{"0.0.0.0/0"}, dst: "127.0.0.1:80", want: whyGateway},
		{name: "loopback anywhere", allow: []string{"127.0.0.0/8"}, dst: "127.1.2.3:22", want: whyGateway},
		{name: "this network", allow: []string{"0.0.0.0/0"}, dst: "0.0.0.0:80", want: whyGateway},
		{name: "this network, any", allow: []string{"0.0.0.0/0"}, dst: "0.1.2.3:80", want: whyGateway},
		{name: "IPv6 loopback", allow: []string{"::/0"}, dst: "[::1]:80", want: whyGateway},
		{name: "mapped loopback", allow: []string{"0.0.0.0/0"}, dst: "[::ffff:127.0.0.1]:80", want: whyGateway},
		{name: "the veth it came by", allow: []string{"0.0.0.0/0"}, dst: "10.88.0.1:8080", want: whyGateway},
		{name: "another sandbox's veth", allow: []string{"0.0.0.0/0"}, dst: "10.88.0.5:8080", want: whyGateway},
		{name: "another sandbox", allow: []string{"10.88.0.0/16"}, dst: "10.88.0.6:22", want: whyGateway},
		{name: "a host interface", allow: []string{"0.0.0.0/0"}, dst: "198.20.0.77:8080", want: whyGateway},
		{name: "a host interface, exact rule", allow: []string{"198.20.0.77/32:8080"}, dst: "198.20.0.77:8080", want: whyGateway},
		{name: "a host interface by name", allow: []string{"node.example.test"}, dst: "198.20.0.77:443", host: "node.example.test", want: whyGateway},
		{name: "connect to a host interface", allow: []string{"node.example.test"}, dst: "198.20.0.77:443", host: "node.example.test", connect: true, want: whyGateway},
		{name: "connect to a sandbox", allow: []string{"peer.example.test", "10.0.0.0/8"}, dst: "10.88.0.6:22", host: "peer.example.test", connect: true, want: whyGateway},
		{name: "connect skips the node's address", allow: []string{"mixed.example.test"}, dst: "198.20.0.10:443", host: "mixed.example.test", connect: true, want: whyAllowed},
		{name: "elsewhere", allow: []string{"0.0.0.0/0"}, dst: "198.20.0.78:80", want: whyAllowed},

		{name: "metadata under 0.0.0.0/0", allow: []string{"0.0.0.0/0"}, dst: "169.254.169.254:80", want: whySpecial},
		{name: "metadata under link-local", allow: []string{"169.254.0.0/16"}, dst: "169.254.169.254:80", want: whySpecial},
		{name: "metadata named", allow: []string{"169.254.169.254"}, dst: "169.254.169.254:80", want: whyAllowed},
		{name: "metadata named with port", allow: []string{"169.254.169.254:80"}, dst: "169.254.169.254:80", want: whyAllowed},
		{name: "metadata by a static name", allow: []string{"meta.example.test"}, dst: "169.254.169.254:80", host: "meta.example.test", want: whySpecial},
		{name: "connect to metadata by a static name", allow: []string{"meta.example.test"}, dst: "169.254.169.254:80", host: "meta.example.test", connect: true, want: whySpecial},
		{name: "IPv6 metadata under ::/0", allow: []string{"::/0"}, dst: "[fd00:ec2::254]:80", want: whySpecial},
		{name: "IPv6 metadata named", allow: []string{"[fd00:ec2::254]:80"}, dst: "[fd00:ec2::254]:80", want: whyAllowed},
		{name: "other link-local under its CIDR", allow: []string{"169.254.0.0/16"}, dst: "169.254.1.1:80", want: whyAllowed},

		{name: "NAT64 by name", allow: []string{"nat64.example.test"}, dst: "[64:ff9b::a00:1]:80", host: "nat64.example.test", want: whySpecial},
		{name: "NAT64 by CIDR", allow: []string{"64:ff9b::/96"}, dst: "[64:ff9b::a00:1]:80", want: whyAllowed},
		{name: "connect to NAT64 by name", allow: []string{"nat64.example.test"}, dst: "[64:ff9b::a00:1]:80", host: "nat64.example.test", connect: true, want: whySpecial},
	}
	for _, addr := range []string{"198.18.0.1", "198.19.2.3", "192.0.0.8", "192.0.2.1", "198.51.100.1", "203.0.113.1", "[2002:a00:1::1]", "[2001:0:4136:e378::1]", "[64:ff9b::a00:1]"} {
		tests = append(tests, struct {
			name    string
			allow   []string
			dst     string
			host    string
			connect bool
			want    why
		}{name: "special " + addr + " by a resolved name", allow: []string{"any.example.test"}, dst: addr + ":443", host: "any.example.test", want: whySpecial})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg.SetPolicy(sandboxID, MustParse(tt.allow...), Policy{})
			p, _ := reg.peer(sandboxAddr)
			dst := ap(tt.dst)
			if tt.host != "" {
				addrs := resolving[tt.host]
				if addrs == nil {
					addrs = []netip.Addr{dst.Addr()}
				}
				reg.remember(p.sb, tt.host, addrs)
			}
			var v verdict
			if tt.connect {
				v, _ = g.decideConnect(t.Context(), p, tt.host, int(dst.Port()), arrival)
			} else {
				v = g.decide(p, dst, tt.host, arrival)
			}
			if v.why != tt.want || v.allow != (tt.want == whyAllowed) {
				t.Errorf("verdict %v (allow %v), want %v", v.why, v.allow, tt.want)
			}
		})
	}
}

// TestIsNodeAddrLive: the gateway's own view of the node's addresses is
// the kernel's, at the moment it decides: an address added to an interface
// counts at once, also while the interface is down, and not once removed.
func TestIsNodeAddrLive(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (adds an interface)")
	}
	b := make([]byte, 3)
	rand.Read(b)
	link, peer := "cvna"+hex.EncodeToString(b), "cvnb"+hex.EncodeToString(b)
	addr := netip.AddrFrom4([4]byte{198, 18, b[1], b[2] | 1}) // benchmarking range: on no real network
	if isNodeAddr(addr) {
		t.Skipf("%s is already an address here", addr)
	}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	ip("link", "add", link, "type", "veth", "peer", "name", peer)
	t.Cleanup(func() { exec.Command("ip", "link", "del", link).Run() })
	ip("addr", "add", addr.String()+"/32", "dev", link)
	if !isNodeAddr(addr) {
		t.Errorf("%s on a down interface is not the node's", addr)
	}
	ip("link", "set", link, "up")
	if !isNodeAddr(addr) {
		t.Errorf("%s on an up interface is not the node's", addr)
	}
	ip("addr", "del", addr.String()+"/32", "dev", link)
	if isNodeAddr(addr) {
		t.Errorf("%s is still the node's after its removal", addr)
	}
	for _, a := range []string{"127.0.0.1", "::1"} {
		if !isNodeAddr(netip.MustParseAddr(a)) {
			t.Errorf("%s is not the node's", a)
		}
	}
}
