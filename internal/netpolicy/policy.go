// Package netpolicy decides what a sandbox may reach on the network: the
// policy language, the registry of sandboxes known to a node with what they
// did (observations), the DNS resolver that answers only allowed names and the
// transparent TCP gateway that every sandbox connection is redirected to.
//
// The fence (veth pairs and nftables) lives elsewhere; it sends all TCP from a
// sandbox to the Gateway and all DNS to the Resolver.
package netpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Policy is a parsed, immutable network policy. The zero Policy denies all.
//
// Entries are:
//
//	host            exactly that name, any port         api.github.com
//	*.suffix        any name below suffix (not suffix)  *.pythonhosted.org
//	CIDR            any address in the prefix           192.0.2.0/24, 2001:db8::/32
//	IP              a single address (/32 or /128)      192.0.2.7
//
// each optionally followed by :port (IPv6 forms take the port after a bracket,
// [2001:db8::/32]:443, or after the prefix length, 2001:db8::/32:443).
//
// Names only ever match names (a TLS SNI, an HTTP Host, a CONNECT target or a
// DNS question); addresses only match CIDR entries. Private, loopback,
// link-local and other special-purpose addresses are reachable only through a
// CIDR entry, metadata addresses only through an entry naming them exactly.
type Policy struct {
	entries []string
	names   []nameRule
	cidrs   []cidrRule
}

type nameRule struct {
	name   string // lower case, no trailing dot; for a suffix rule, without "*."
	suffix bool
	port   uint16 // 0: any
}

type cidrRule struct {
	prefix netip.Prefix
	port   uint16 // 0: any
}

// Parse parses the allow list of a policy. Blank entries are ignored, so an
// empty list (or one of blank strings) is a policy that denies everything.
// The error names the first bad entry.
func Parse(allow []string) (Policy, error) {
	var p Policy
	for _, raw := range allow {
		s := strings.ToLower(strings.TrimSpace(raw))
		if s == "" {
			continue
		}
		canon, err := p.add(s)
		if err != nil {
			return Policy{}, fmt.Errorf("network entry %q: %w", raw, err)
		}
		p.entries = append(p.entries, canon)
	}
	return p, nil
}

// MustParse is Parse for tests and constants; it panics on a bad entry.
func MustParse(allow ...string) Policy {
	p, err := Parse(allow)
	if err != nil {
		panic(err)
	}
	return p
}

// Entries returns the policy's entries in canonical form (lower case, CIDRs
// masked, single addresses as /32 or /128), in the order given.
func (p Policy) Entries() []string {
	return append([]string(nil), p.entries...)
}

// String returns the entries joined by commas.
func (p Policy) String() string { return strings.Join(p.entries, ",") }

// add parses one lower-cased, trimmed entry, adds its rule and returns its
// canonical form.
func (p *Policy) add(s string) (string, error) {
	if strings.Contains(s, "://") || strings.ContainsAny(s, " \t?#@") || strings.Contains(s, "/") && strings.ContainsAny(s, "*") {
		return "", errSyntax
	}
	// Bracketed IPv6: [addr]:port or [prefix]:port.
	if inner, ok := strings.CutPrefix(s, "["); ok {
		addr, rest, ok := strings.Cut(inner, "]")
		if !ok {
			return "", errSyntax
		}
		port, err := parseOptPort(rest)
		if err != nil {
			return "", err
		}
		prefix, err := parsePrefixOrAddr(addr)
		if err != nil {
			return "", err
		}
		if !prefix.Addr().Is6() {
			return "", errSyntax
		}
		return p.addCIDR(prefix, port), nil
	}
	// CIDR, with an optional :port after the prefix length.
	if addr, rest, ok := strings.Cut(s, "/"); ok {
		bits, portStr, hasPort := strings.Cut(rest, ":")
		var port uint16
		if hasPort {
			var err error
			if port, err = parsePort(portStr); err != nil {
				return "", err
			}
		}
		prefix, err := netip.ParsePrefix(addr + "/" + bits)
		if err != nil {
			return "", fmt.Errorf("bad CIDR: %w", err)
		}
		return p.addCIDR(prefix, port), nil
	}
	// A bare address (IPv6 without port included).
	if a, err := netip.ParseAddr(s); err == nil {
		return p.addCIDR(netip.PrefixFrom(a, a.BitLen()), 0), nil
	}
	host, port := s, uint16(0)
	if h, portStr, ok := strings.Cut(s, ":"); ok {
		if strings.Contains(portStr, ":") {
			return "", fmt.Errorf("%w (put an IPv6 address in brackets: [2001:db8::1]:443)", errSyntax)
		}
		var err error
		if port, err = parsePort(portStr); err != nil {
			return "", err
		}
		host = h
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return p.addCIDR(netip.PrefixFrom(a, a.BitLen()), port), nil
	}
	rule := nameRule{port: port}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		rule.suffix = true
		host = rest
	}
	host = strings.TrimSuffix(host, ".")
	if err := validName(host); err != nil {
		return "", err
	}
	rule.name = host
	p.names = append(p.names, rule)
	canon := host
	if rule.suffix {
		canon = "*." + host
	}
	return withPort(canon, port), nil
}

func (p *Policy) addCIDR(prefix netip.Prefix, port uint16) string {
	prefix = netip.PrefixFrom(prefix.Addr().Unmap(), prefix.Bits()).Masked()
	if prefix.Addr().Is4() && prefix.Bits() > 32 {
		prefix = netip.PrefixFrom(prefix.Addr(), 32)
	}
	p.cidrs = append(p.cidrs, cidrRule{prefix: prefix, port: port})
	return withPort(prefix.String(), port)
}

var errSyntax = fmt.Errorf("want host, *.suffix, CIDR or IP, each with an optional :port")

func parsePrefixOrAddr(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("bad CIDR: %w", err)
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("bad address: %w", err)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func parseOptPort(s string) (uint16, error) {
	if s == "" {
		return 0, nil
	}
	rest, ok := strings.CutPrefix(s, ":")
	if !ok {
		return 0, errSyntax
	}
	return parsePort(rest)
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("bad port %q: want 1-65535", s)
	}
	return uint16(n), nil
}

func withPort(s string, port uint16) string {
	if port == 0 {
		return s
	}
	return s + ":" + strconv.Itoa(int(port))
}

// validName accepts DNS names made of letters, digits, '-' and '_' (single
// labels such as "db" included, for static names of private services).
func validName(s string) error {
	if s == "" {
		return errSyntax
	}
	if len(s) > 253 {
		return fmt.Errorf("name longer than 253 characters")
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("bad name %q: empty or over-long label", s)
		}
		for _, c := range label {
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			case c == '*':
				return fmt.Errorf("bad name %q: a wildcard may only be a leading \"*.\"", s)
			default:
				return fmt.Errorf("bad name %q: unexpected %q", s, c)
			}
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("bad name %q: a label starts or ends with '-'", s)
		}
	}
	return nil
}

// normName lower-cases a name and drops a trailing dot.
func normName(s string) string {
	return strings.TrimSuffix(strings.ToLower(s), ".")
}

// AllowsName reports whether a name rule allows name at port (port 0 asks
// "at any port", as the resolver does).
func (p Policy) AllowsName(name string, port int) bool {
	name = normName(name)
	if name == "" {
		return false
	}
	for _, r := range p.names {
		if port != 0 && r.port != 0 && int(r.port) != port {
			continue
		}
		if r.suffix {
			if strings.HasSuffix(name, "."+r.name) {
				return true
			}
		} else if name == r.name {
			return true
		}
	}
	return false
}

// AllowsAddr reports whether a CIDR rule allows addr at port. A metadata
// address (IsMetadata) is allowed only by a rule naming it exactly.
func (p Policy) AllowsAddr(addr netip.Addr, port int) bool {
	addr = addr.Unmap()
	for _, r := range p.cidrs {
		if r.port != 0 && int(r.port) != port {
			continue
		}
		if r.prefix.Contains(addr) && (r.prefix.IsSingleIP() || !IsMetadata(addr)) {
			return true
		}
	}
	return false
}

// special are the addresses the gateway never dials unless a CIDR rule names
// them: private, loopback, link-local, shared (CGNAT), metadata, multicast,
// reserved, documentation and benchmarking ranges, and the IPv6 ranges that
// carry IPv4 or lead through a translator or relay (IPv4-compatible, NAT64,
// 6to4, Teredo), whose far end may be anything, the node's own network
// included. The IANA special-purpose registries list them.
var special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),   // TEST-NET-1
	netip.MustParsePrefix("192.88.99.0/24"), // 6to4 relay anycast
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/96"),          // unspecified, loopback, IPv4-compatible
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("100::/64"),       // discard-only
	netip.MustParsePrefix("2001::/23"),      // IETF protocol assignments, Teredo (2001::/32) included
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
	netip.MustParsePrefix("2002::/16"),      // 6to4
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fec0::/10"), // site-local (deprecated)
	netip.MustParsePrefix("ff00::/8"),
}

// metadata are the cloud instance-metadata addresses (AWS, GCP, Azure,
// Oracle and the link-local ECS/EKS credential endpoints, Alibaba). They hand
// out the host's credentials, so only a rule naming one exactly (a /32 or
// /128, with or without a port) reaches one; a broad CIDR such as
// 169.254.0.0/16 or 0.0.0.0/0 does not, and neither does a name.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("169.254.170.2"),
	netip.MustParseAddr("169.254.170.23"),
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("fd00:ec2::23"),
}

// IsMetadata reports whether addr is a cloud instance-metadata address,
// reachable only through a rule naming it exactly.
func IsMetadata(addr netip.Addr) bool {
	return slices.Contains(metadata, addr.Unmap())
}

// IsSpecial reports whether addr is private, loopback, link-local, metadata or
// otherwise not a public unicast address.
func IsSpecial(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range special {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
