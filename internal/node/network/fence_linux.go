// Package network gives each sandbox its link to the node and fences it:
// a veth pair between the host and the sandbox's network namespace, a /30
// of a configurable subnet, and one nftables table that sends all of a
// sandbox's TCP to the node's gateway and all its DNS to the node's
// resolver and drops everything else. IP forwarding is never needed:
// nothing a sandbox sends is routed.
//
// The table is replaced atomically (one nft transaction) at start with the
// links found on disk, so a restart of the node opens no window; a sandbox
// joins the fence (its interface name in the set) before its interface
// exists.
//
// Everything behind the fence (the resolver, the gateway, their policies
// and the events they write) knows a sandbox by its source address, so a
// packet from a sandbox's interface must carry that sandbox's own address:
// the table drops any other before anything reads it (before connection
// tracking and the redirects), and reverse-path filtering on the host side
// of each veth drops it again, each on its own.
package network

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/nsthread"
)

// Config configures the fence.
type Config struct {
	// Dir keeps one link file per sandbox (its addresses survive restarts).
	Dir string
	// Subnet is carved into one /30 per sandbox. Default 10.88.0.0/16.
	Subnet netip.Prefix
	// Table is the nftables table (family inet). Default "cove".
	Table string
	// GatewayPort and DNSPort are the node's gateway and resolver ports,
	// on every address of the host; the fence sends sandboxes there.
	GatewayPort, DNSPort uint16
	// NFT is the nft binary. Default "nft".
	NFT string
}

// Link is a sandbox's side of the node.
type Link struct {
	Index       int        `json:"index"` // which /30 of the subnet
	HostIface   string     `json:"host_iface"`
	HostAddr    netip.Addr `json:"host_addr"`    // the sandbox's gateway and resolver address
	SandboxAddr netip.Addr `json:"sandbox_addr"` // eth0 inside the sandbox
}

// Fence keeps the links and the nftables table of one node.
type Fence struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	links map[string]Link // by sandbox ID
	used  map[int]bool
	// ports are the ports each sandbox publishes (previews), kept while
	// it sleeps, so that a new link publishes them again.
	ports map[string]map[uint16]bool
	// laid are the sandboxes whose link Lay fenced, whose Attach has not
	// come yet.
	laid map[string]bool
}

// New returns a fence; Init installs its table.
func New(cfg Config, log *slog.Logger) (*Fence, error) {
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = netip.MustParsePrefix("10.88.0.0/16")
	}
	if cfg.Table == "" {
		cfg.Table = "cove"
	}
	if cfg.NFT == "" {
		cfg.NFT = "nft"
	}
	switch {
	case !cfg.Subnet.Addr().Is4() || cfg.Subnet.Bits() > 28:
		return nil, fmt.Errorf("network subnet %s: want an IPv4 prefix of /28 or larger", cfg.Subnet)
	case cfg.GatewayPort == 0 || cfg.DNSPort == 0:
		return nil, errors.New("network: gateway and DNS ports are required")
	case cfg.Dir == "":
		return nil, errors.New("network: a directory for links is required")
	}
	cfg.Subnet = cfg.Subnet.Masked()
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	return &Fence{cfg: cfg, log: log, links: map[string]Link{}, used: map[int]bool{}, ports: map[string]map[uint16]bool{}, laid: map[string]bool{}}, nil
}

// Init loads the links on disk and replaces the node's table with one that
// fences every one of them, in one transaction.
func (f *Fence) Init(ctx context.Context) error {
	entries, err := os.ReadDir(f.cfg.Dir)
	if err != nil {
		return err
	}
	f.mu.Lock()
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(f.cfg.Dir, e.Name()))
		if err != nil {
			continue
		}
		var l Link
		if json.Unmarshal(b, &l) != nil {
			continue
		}
		id := strings.TrimSuffix(e.Name(), ".json")
		f.links[id] = l
		f.used[l.Index] = true
	}
	links := make([]Link, 0, len(f.links))
	for _, l := range f.links {
		links = append(links, l)
	}
	f.mu.Unlock()
	// Veths kept across a restart get strict reverse-path filtering too
	// (one attached by an older node may lack it).
	for _, l := range links {
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+l.HostIface+"/rp_filter", []byte("1"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			f.log.Warn("reverse-path filtering", "iface", l.HostIface, "err", err)
		}
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/conf/all/rp_filter"); err == nil && strings.TrimSpace(string(b)) == "2" {
		// The kernel applies the larger of "all" and the interface's value.
		f.log.Warn("net.ipv4.conf.all.rp_filter is 2 (loose): sandboxes' veths get loose reverse-path filtering, not strict; the nftables source check still holds")
	}
	return f.nft(ctx, f.tableScript(links))
}

// Chains and sets of the table, by name.
const (
	setSandboxes = "sandboxes" // host sides of the sandboxes' veths
	setSources   = "sources"   // host side . the sandbox's own address
	setPublished = "published" // a sandbox's address . a port it publishes
	chainOutput  = "output"    // what the node may send into sandboxes
	chainSources = "antispoof" // drops what a sandbox sends from another address
)

// tableScript defines the whole table; the first two lines make the
// replacement atomic whether or not the table exists.
func (f *Fence) tableScript(links []Link) string {
	var ifaces, sources, published string
	var pubs []string
	f.mu.Lock()
	for id, l := range f.links {
		for p := range f.ports[id] {
			pubs = append(pubs, publishedElem(l, p))
		}
	}
	f.mu.Unlock()
	if len(pubs) > 0 {
		published = "elements = { " + strings.Join(pubs, ", ") + " }"
	}
	if len(links) > 0 {
		names, pairs := make([]string, len(links)), make([]string, len(links))
		for i, l := range links {
			names[i], pairs[i] = strconv.Quote(l.HostIface), l.source()
		}
		ifaces = "elements = { " + strings.Join(names, ", ") + " }"
		sources = "elements = { " + strings.Join(pairs, ", ") + " }"
	}
	t, gw, dns := f.cfg.Table, f.cfg.GatewayPort, f.cfg.DNSPort
	return fmt.Sprintf(`table inet %[1]s {}
delete table inet %[1]s
table inet %[1]s {
	set %[6]s {
		type ifname
		%[4]s
	}
	set %[7]s {
		type ifname . ipv4_addr
		%[5]s
	}
	# Ports that sandboxes publish: the node (its own user only) may open
	# connections to them, and to nothing else of a sandbox.
	set %[9]s {
		type ipv4_addr . inet_service
		%[10]s
	}
	# A sandbox's packets carry its own address or are dropped, before
	# connection tracking (raw) and the redirects (dstnat). Its IPv6 is off:
	# any IPv6 packet from it is dropped too.
	chain %[8]s {
		type filter hook prerouting priority raw; policy accept;
		iifname @sandboxes iifname . ip saddr != @sources drop
		iifname @sandboxes meta nfproto ipv6 drop
	}
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		iifname @sandboxes udp dport 53 redirect to :%[3]d
		iifname @sandboxes tcp dport 53 redirect to :%[3]d
		iifname @sandboxes meta l4proto tcp redirect to :%[2]d
	}
	chain input {
		type filter hook input priority filter; policy accept;
		iifname @sandboxes udp dport %[3]d accept
		iifname @sandboxes tcp dport %[3]d accept
		iifname @sandboxes tcp dport %[2]d accept
		iifname @sandboxes ct direction reply ip saddr . tcp sport @%[9]s accept
		iifname @sandboxes drop
		# Other hosts never reach the gateway or the resolver. Loopback
		# is left alone: those ports answer only sandboxes' addresses
		# anyway, and a table outliving its node (a kill -9) must not
		# take the port from a local service that binds it next.
		iifname != "lo" tcp dport %[2]d drop
		iifname != "lo" tcp dport %[3]d drop
		iifname != "lo" udp dport %[3]d drop
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		iifname @sandboxes drop
		oifname @sandboxes drop
	}
	# The node reaches a sandbox only to answer what the sandbox opened
	# (the gateway, the resolver) and at the ports it publishes, from this
	# process's user: a preview's router. Nothing else of the host may
	# open a connection into a sandbox.
	chain %[12]s {
		type filter hook output priority filter; policy accept;
		oifname @sandboxes ct direction reply accept
		oifname @sandboxes ip daddr . tcp dport @%[9]s ct state established accept
		oifname @sandboxes ip daddr . tcp dport @%[9]s ct state new meta skuid %[11]d accept
		oifname @sandboxes drop
	}
}
`, t, gw, dns, ifaces, sources, setSandboxes, setSources, chainSources, setPublished, published, os.Geteuid(), chainOutput)
}

// source is the link's element of the sources set: the host side of its
// veth and the only address the sandbox may send from.
func (l Link) source() string {
	return strconv.Quote(l.HostIface) + " . " + l.SandboxAddr.String()
}

func (f *Fence) nft(ctx context.Context, script string) error {
	cmd := exec.CommandContext(ctx, f.cfg.NFT, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Close removes the node's table. Sandboxes left running lose their
// network (fail closed: without the table nothing is redirected, and their
// veths lead nowhere routable).
func (f *Fence) Close(ctx context.Context) error {
	return f.nft(ctx, fmt.Sprintf("table inet %[1]s {}\ndelete table inet %[1]s\n", f.cfg.Table))
}

// Allocate gives a sandbox its link (the same one again when it has one)
// and writes it to disk. Nothing is created on the host yet.
func (f *Fence) Allocate(id string) (Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.links[id]; ok {
		return l, nil
	}
	slots := 1 << (32 - f.cfg.Subnet.Bits() - 2)
	for i := 0; i < slots; i++ {
		if f.used[i] {
			continue
		}
		base := f.cfg.Subnet.Addr().As4()
		n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
		n += uint32(i) * 4
		host := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n + 1)})
		sbx := netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n + 2)})
		l := Link{Index: i, HostIface: ifaceName(id), HostAddr: host, SandboxAddr: sbx}
		b, _ := json.Marshal(l)
		if err := os.WriteFile(f.linkFile(id), b, 0o600); err != nil {
			return Link{}, err
		}
		f.links[id], f.used[i] = l, true
		return l, nil
	}
	return Link{}, api.Errorf(api.CodeResourceExhausted, "the node's sandbox subnet %s is full", f.cfg.Subnet)
}

// Subnet is the prefix the fence gives sandboxes their links from: every
// sandbox and every host side of their veths.
func (f *Fence) Subnet() netip.Prefix { return f.cfg.Subnet }

// Link returns a sandbox's link, if it has one.
func (f *Fence) Link(id string) (Link, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[id]
	return l, ok
}

func (f *Fence) linkFile(id string) string { return filepath.Join(f.cfg.Dir, id+".json") }

// ifaceName is the host-side interface of a sandbox: at most 15 bytes.
// cove bench (internal/cli hostIface) names it the same way to look for
// leftovers.
func ifaceName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "cv" + hex.EncodeToString(sum[:])[:12]
}

// Attach fences the sandbox and connects it: its interface joins the set
// first, then the veth pair is made straddling the host and the network
// namespace of process pid, where its peer is born as eth0 with the
// sandbox's address and a default route to the host side, and IPv6 is
// turned off on both ends. A link Lay fenced already is only connected.
func (f *Fence) Attach(ctx context.Context, id string, pid int) (Link, error) {
	f.mu.Lock()
	l, laid := f.links[id]
	laid = laid && f.laid[id]
	delete(f.laid, id)
	f.mu.Unlock()
	if !laid {
		var err error
		if l, err = f.Lay(ctx, id); err != nil {
			return l, err
		}
		f.mu.Lock()
		delete(f.laid, id)
		f.mu.Unlock()
	}
	if err := join(l, pid); err != nil {
		return l, fmt.Errorf("connect %s: %w", id, err)
	}
	return l, nil
}

// Lay does the part of Attach that needs no sandbox yet, so that it can
// run while the sandbox starts: the link is allocated and its interface
// joins the set, with its address beside it, before the interface
// exists. Detach removes a laid link as it removes an attached one.
func (f *Fence) Lay(ctx context.Context, id string) (Link, error) {
	l, err := f.Allocate(id)
	if err != nil {
		return l, err
	}
	// One transaction: the interface is never in the set without its
	// address beside it.
	script := fmt.Sprintf("add element inet %[1]s %[2]s { %[3]q }\nadd element inet %[1]s %[4]s { %[5]s }\n",
		f.cfg.Table, setSandboxes, l.HostIface, setSources, l.source())
	f.mu.Lock()
	for p := range f.ports[id] {
		script += fmt.Sprintf("add element inet %s %s { %s }\n", f.cfg.Table, setPublished, publishedElem(l, p))
	}
	f.mu.Unlock()
	if err := f.nft(ctx, script); err != nil {
		return l, fmt.Errorf("fence %s: %w", id, err)
	}
	f.mu.Lock()
	f.laid[id] = true
	f.mu.Unlock()
	return l, nil
}

// join connects l to the network namespace of process pid: the veth pair
// is made with its peer inside that namespace from the start, as eth0
// (moving a device between namespaces waits for the kernel's RCU grace
// periods, tens of milliseconds on a busy host; making it there does
// not). The host's end gets strict reverse-path filtering and no IPv6
// before it is up; eth0 gets the sandbox's address and a default route.
func join(l Link, pid int) error {
	// A leftover of an interrupted attach goes first.
	if old, err := netlink.LinkByName(l.HostIface); err == nil {
		netlink.LinkDel(old)
	}
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return fmt.Errorf("network namespace of %d: %w", pid, err)
	}
	defer ns.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: l.HostIface}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth: %w", err)
	}
	host, err := netlink.LinkByName(l.HostIface)
	if err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+l.HostIface+"/disable_ipv6", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("disable IPv6 on %s: %w", l.HostIface, err)
	}
	// Strict reverse-path filtering, before the link is up: a packet
	// arriving here from any address not routed back through this veth
	// (another sandbox's, a host's, the node's own) is dropped.
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+l.HostIface+"/rp_filter", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("reverse-path filtering on %s: %w", l.HostIface, err)
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: prefix30(l.HostAddr)}); err != nil {
		return fmt.Errorf("address %s: %w", l.HostIface, err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return err
	}
	// Netlink inside the sandbox goes through a handle opened in its
	// namespace; only the sysctl write needs a thread in there.
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in the sandbox: %w", err)
	}
	defer h.Close()
	p, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := nsthread.Run(int(ns), unix.CLONE_NEWNET, func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/all/disable_ipv6", []byte("1"), 0o644)
	}); err != nil {
		return fmt.Errorf("disable IPv6 in the sandbox: %w", err)
	}
	if err := h.AddrAdd(p, &netlink.Addr{IPNet: prefix30(l.SandboxAddr)}); err != nil {
		return err
	}
	if err := h.LinkSetUp(p); err != nil {
		return err
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: p.Attrs().Index, Gw: net.IP(l.HostAddr.AsSlice())}); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	return nil
}

func prefix30(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(30, 32)}
}

// Detach disconnects and unfences a sandbox and frees its link. It is
// idempotent.
func (f *Fence) Detach(ctx context.Context, id string) error {
	f.mu.Lock()
	l, ok := f.links[id]
	f.mu.Unlock()
	if !ok {
		return nil
	}
	var errs []error
	if host, err := netlink.LinkByName(l.HostIface); err == nil {
		if err := netlink.LinkDel(host); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", l.HostIface, err))
		}
	}
	// Removing an element that is not there is an error to nft; only a
	// present one is deleted.
	script := fmt.Sprintf("add element inet %[1]s %[2]s { %[3]q }\ndelete element inet %[1]s %[2]s { %[3]q }\n"+
		"add element inet %[1]s %[4]s { %[5]s }\ndelete element inet %[1]s %[4]s { %[5]s }\n",
		f.cfg.Table, setSandboxes, l.HostIface, setSources, l.source())
	f.mu.Lock()
	for p := range f.ports[id] {
		script += elemGone(f.cfg.Table, setPublished, publishedElem(l, p))
	}
	f.mu.Unlock()
	if err := f.nft(ctx, script); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(f.linkFile(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		f.mu.Lock()
		delete(f.links, id)
		delete(f.used, l.Index)
		delete(f.laid, id)
		f.mu.Unlock()
	}
	return errors.Join(errs...)
}

func publishedElem(l Link, port uint16) string {
	return l.SandboxAddr.String() + " . " + strconv.Itoa(int(port))
}

// elemGone removes an element whether or not it is there (removing an
// absent one is an error to nft).
func elemGone(table, set, elem string) string {
	return fmt.Sprintf("add element inet %[1]s %[2]s { %[3]s }\ndelete element inet %[1]s %[2]s { %[3]s }\n", table, set, elem)
}

// Publish makes ports the only ports of the sandbox the node may connect
// to (none for an empty list). It holds while the sandbox sleeps: a link
// it gets later publishes them again. Forget drops them for good. It is
// for publishing again what a restarted node forgot; PublishPort and
// UnpublishPort change one port.
func (f *Fence) Publish(ctx context.Context, id string, ports []uint16) error {
	set := make(map[uint16]bool, len(ports))
	for _, p := range ports {
		set[p] = true
	}
	f.mu.Lock()
	old := f.ports[id]
	if len(set) == 0 {
		delete(f.ports, id)
	} else {
		f.ports[id] = set
	}
	l, linked := f.links[id]
	f.mu.Unlock()
	if !linked {
		return nil
	}
	var script strings.Builder
	for p := range old {
		if !set[p] {
			script.WriteString(elemGone(f.cfg.Table, setPublished, publishedElem(l, p)))
		}
	}
	for p := range set {
		fmt.Fprintf(&script, "add element inet %s %s { %s }\n", f.cfg.Table, setPublished, publishedElem(l, p))
	}
	if script.Len() == 0 {
		return nil
	}
	if err := f.nft(ctx, script.String()); err != nil {
		return fmt.Errorf("publish ports of %s: %w", id, err)
	}
	return nil
}

// PublishPort adds one port to those of the sandbox the node may connect
// to: one element of the published set, however many the sandbox has.
func (f *Fence) PublishPort(ctx context.Context, id string, port uint16) error {
	f.mu.Lock()
	had := f.ports[id][port]
	if f.ports[id] == nil {
		f.ports[id] = map[uint16]bool{}
	}
	f.ports[id][port] = true
	l, linked := f.links[id]
	f.mu.Unlock()
	if !linked {
		return nil
	}
	err := f.nft(ctx, fmt.Sprintf("add element inet %s %s { %s }\n", f.cfg.Table, setPublished, publishedElem(l, port)))
	if err != nil {
		if !had {
			f.mu.Lock()
			delete(f.ports[id], port)
			f.mu.Unlock()
		}
		return fmt.Errorf("publish port %d of %s: %w", port, id, err)
	}
	return nil
}

// UnpublishPort takes one port away from those the node may connect to.
func (f *Fence) UnpublishPort(ctx context.Context, id string, port uint16) error {
	f.mu.Lock()
	delete(f.ports[id], port)
	if len(f.ports[id]) == 0 {
		delete(f.ports, id)
	}
	l, linked := f.links[id]
	f.mu.Unlock()
	if !linked {
		return nil
	}
	if err := f.nft(ctx, elemGone(f.cfg.Table, setPublished, publishedElem(l, port))); err != nil {
		return fmt.Errorf("unpublish port %d of %s: %w", port, id, err)
	}
	return nil
}
