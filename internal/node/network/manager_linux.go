package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/api"
	"github.com/cove-dev/cove/internal/netpolicy"
	"github.com/cove-dev/cove/internal/node"
)

// Manager joins the fence and the gateway's registry: it is what the node
// calls to connect, reconnect, re-police and disconnect sandboxes.
type Manager struct {
	fence *Fence
	reg   *netpolicy.Registry
	dir   string // resolv.conf files, readable by the sandboxes' mapped root
}

// NewManager returns a manager keeping resolv.conf files in dir.
func NewManager(f *Fence, reg *netpolicy.Registry, dir string) (*Manager, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	return &Manager{fence: f, reg: reg, dir: dir}, nil
}

func (m *Manager) resolvConf(id string) string { return filepath.Join(m.dir, id+".resolv.conf") }

// Prepare gives a sandbox its link and writes the resolv.conf that points
// it at the node's resolver.
func (m *Manager) Prepare(id string) (string, error) {
	l, err := m.fence.Allocate(id)
	if err != nil {
		return "", err
	}
	p := m.resolvConf(id)
	conf := fmt.Sprintf("nameserver %s\noptions ndots:0 attempts:2 timeout:2\n", l.HostAddr)
	if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
		return "", err
	}
	return p, nil
}

// Lay fences the sandbox's link while the sandbox starts (Fence.Lay);
// Connect makes it. Disconnect removes it.
func (m *Manager) Lay(ctx context.Context, id string) error {
	_, err := m.fence.Lay(ctx, id)
	return err
}

func parse(p api.NetworkPolicy) (policy, setup netpolicy.Policy, err error) {
	if policy, err = netpolicy.Parse(p.Allow); err != nil {
		return policy, setup, err
	}
	setup, err = netpolicy.Parse(p.SetupAllow)
	return policy, setup, err
}

// Connect registers the sandbox's address and policy with the gateway and
// resolver, then fences and connects it.
func (m *Manager) Connect(ctx context.Context, id string, pid int, p api.NetworkPolicy, inject []node.InjectSecret, ca *netpolicy.SandboxCA) error {
	policy, setup, err := parse(p)
	if err != nil {
		return err
	}
	in, err := injection(p, inject)
	if err != nil {
		return err
	}
	l, err := m.fence.Allocate(id)
	if err != nil {
		return err
	}
	m.reg.Add(id, l.SandboxAddr, policy, setup)
	m.reg.SetInjection(id, in, ca)
	if _, err := m.fence.Attach(ctx, id, pid); err != nil {
		m.reg.Remove(id)
		return err
	}
	return nil
}

// Reconnect registers a sandbox that kept running across a restart; its
// link and rules are still in place.
func (m *Manager) Reconnect(id string, p api.NetworkPolicy, inject []node.InjectSecret, ca *netpolicy.SandboxCA) error {
	policy, setup, err := parse(p)
	if err != nil {
		return err
	}
	in, err := injection(p, inject)
	if err != nil {
		return err
	}
	l, ok := m.fence.Link(id)
	if !ok {
		return fmt.Errorf("sandbox %s has no network link on this node", id)
	}
	m.reg.Add(id, l.SandboxAddr, policy, setup)
	m.reg.SetInjection(id, in, ca)
	return nil
}

// SetPolicy changes a sandbox's policy for new connections and lookups.
func (m *Manager) SetPolicy(id string, p api.NetworkPolicy) error {
	policy, setup, err := parse(p)
	if err != nil {
		return err
	}
	rules, err := netpolicy.CheckInject(injectRules(p.Inject))
	if err != nil {
		return err
	}
	m.reg.SetPolicy(id, policy, setup)
	m.reg.SetInjectRules(id, rules)
	return nil
}

// SetInjectSecrets replaces the secrets (values and placeholders) the
// gateway injects for a running sandbox, for its next requests.
func (m *Manager) SetInjectSecrets(id string, inject []node.InjectSecret) {
	values, placeholders := map[string]string{}, map[string]string{}
	for _, s := range inject {
		values[s.Name] = s.Value
		if s.Placeholder != "" {
			placeholders[s.Name] = s.Placeholder
		}
	}
	m.reg.SetInjectSecrets(id, values, placeholders)
}

// CA is a sandbox's gateway CA, nil when it has none.
func (m *Manager) CA(id string) *netpolicy.SandboxCA { return m.reg.CA(id) }

// SetCA gives a running sandbox a gateway CA, if it has none.
func (m *Manager) SetCA(id string, ca *netpolicy.SandboxCA) { m.reg.SetCA(id, ca) }

// injection is the gateway's view of a policy's injection rules and the
// secrets they name; nil without rules.
func injection(p api.NetworkPolicy, secrets []node.InjectSecret) (*netpolicy.Injection, error) {
	if len(p.Inject) == 0 {
		return nil, nil
	}
	rules, err := netpolicy.CheckInject(injectRules(p.Inject))
	if err != nil {
		return nil, err
	}
	in := &netpolicy.Injection{Rules: rules, Secrets: map[string]string{}, Placeholders: map[string]string{}}
	for _, s := range secrets {
		in.Secrets[s.Name] = s.Value
		if s.Placeholder != "" {
			in.Placeholders[s.Name] = s.Placeholder
		}
	}
	return in, nil
}

func injectRules(rules []api.InjectRule) []netpolicy.InjectRule {
	out := make([]netpolicy.InjectRule, len(rules))
	for i, r := range rules {
		out[i] = netpolicy.InjectRule{Host: r.Host, Port: r.Port, PathPrefix: r.PathPrefix, Header: r.Header, Value: r.Value}
	}
	return out
}

// UseSetup switches a sandbox to its setup policy while a setup command
// runs, and back.
func (m *Manager) UseSetup(id string, on bool) { m.reg.UseSetup(id, on) }

// Disconnect removes everything of the sandbox's network.
func (m *Manager) Disconnect(ctx context.Context, id string) error {
	m.reg.Remove(id)
	err := m.fence.Detach(ctx, id)
	if rerr := os.Remove(m.resolvConf(id)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// DrainObservations hands over every sandbox's network reports since the
// last call.
func (m *Manager) DrainObservations() []node.Observation {
	rs := m.reg.Drain()
	out := make([]node.Observation, len(rs))
	for i, r := range rs {
		out[i] = node.Observation{SandboxID: r.SandboxID, NetworkObservation: api.NetworkObservation(r.Observation)}
	}
	return out
}

// PendingObservations are a sandbox's reports not handed over yet.
func (m *Manager) PendingObservations(id string) []api.NetworkObservation {
	obs := m.reg.Pending(id)
	out := make([]api.NetworkObservation, len(obs))
	for i, o := range obs {
		out[i] = api.NetworkObservation(o)
	}
	return out
}

// Counters returns the bytes that went into and out of a sandbox at its
// interface: the host side of its veth, whose transmit is the sandbox's
// input. ok is false when the sandbox has no link up.
func (m *Manager) Counters(id string) (in, out uint64, ok bool) {
	l, found := m.fence.Link(id)
	if !found {
		return 0, 0, false
	}
	return IfaceCounters(SysClassNet, l.HostIface)
}

// SysClassNet is where the kernel shows each interface's statistics.
const SysClassNet = "/sys/class/net"

// IfaceCounters reads an interface's transmit and receive byte counters
// under root (SysClassNet, or a fake tree in tests) as the sandbox sees
// them: what the host side transmits goes in, what it receives came out.
func IfaceCounters(root, iface string) (in, out uint64, ok bool) {
	tx, err1 := readCounter(filepath.Join(root, iface, "statistics", "tx_bytes"))
	rx, err2 := readCounter(filepath.Join(root, iface, "statistics", "rx_bytes"))
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return tx, rx, true
}

// readCounter reads a decimal counter file with three system calls and
// no allocation beyond the path (the meter reads two per sandbox a tick).
func readCounter(path string) (uint64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var buf [32]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(buf[:n])), 10, 64)
}

// Publish sets the ports of a sandbox the node may connect to (previews);
// an empty list publishes none. They outlive a sleep.
func (m *Manager) Publish(ctx context.Context, id string, ports []uint16) error {
	return m.fence.Publish(ctx, id, ports)
}

// PublishPort adds one port to those the node may connect to.
func (m *Manager) PublishPort(ctx context.Context, id string, port uint16) error {
	return m.fence.PublishPort(ctx, id, port)
}

// UnpublishPort takes one port away from those the node may connect to.
func (m *Manager) UnpublishPort(ctx context.Context, id string, port uint16) error {
	return m.fence.UnpublishPort(ctx, id, port)
}

// Addr is the sandbox's address while it has a link.
func (m *Manager) Addr(id string) (netip.Addr, bool) {
	l, ok := m.fence.Link(id)
	return l.SandboxAddr, ok
}
